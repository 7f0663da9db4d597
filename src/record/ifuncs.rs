//! Asks utrace's own dynamic loader which implementation each ifunc of its libc (and libm)
//! resolves to, and reads the traced process's `GLIBC_TUNABLES`: the facts
//! [`IfuncChoices::judge`] weighs.
//!
//! Why utrace's loader: it runs on the same CPU and asks the same resolvers, so for the same
//! build of the library and the same tunables it makes the same choice as the traced process
//! will (a command utrace starts has not even loaded its libraries when the plan is made, so
//! its GOT cannot be read yet). The addresses become virtual addresses in the library's file
//! through the library's load bias (`link_map.l_addr`).

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::path::PathBuf;

use crate::elf::ElfFile;
use crate::plan::{IfuncChoices, IfuncsUnknown, ResolvedIfuncs};

use super::target::Target;

/// The libraries whose ifuncs utrace asks its loader about: those it maps itself.
const OWN_LIBRARIES: [&str; 2] = ["libc.so.6", "libm.so.6"];

/// The environment variable whose tunables can mask CPU features from the resolvers.
const TUNABLES: &str = "GLIBC_TUNABLES";

/// What utrace knows of the ifunc choices of `target`.
pub(super) fn ifunc_choices(target: &Target) -> IfuncChoices {
    let recorder_tunables = std::env::var(TUNABLES).ok();
    let target_tunables = (target.environment_variable(TUNABLES)).map_err(|e| e.to_string());
    // Asking costs a parse of each library: not when the answer cannot be used.
    let resolved = match (&target_tunables, &recorder_tunables) {
        (Ok(None), None) => resolve_own_ifuncs(),
        _ => Ok(Vec::new()),
    };
    IfuncChoices::judge(target_tunables, recorder_tunables, resolved)
}

/// The ifunc choices of utrace's own loader for each of [`OWN_LIBRARIES`] it maps; fails when it
/// maps no libc.
pub(crate) fn resolve_own_ifuncs() -> Result<Vec<ResolvedIfuncs>, IfuncsUnknown> {
    let mut resolved = Vec::new();
    for soname in OWN_LIBRARIES {
        match resolve_library(soname)? {
            Some(library) => resolved.push(library),
            None if soname == "libc.so.6" => return Err(IfuncsUnknown::NoLibc),
            None => {}
        }
    }
    let counts: Vec<String> = (resolved.iter())
        .map(|l| format!("{} in {}", l.implementations.len(), l.path.display()))
        .collect();
    log::debug!(
        "ifuncs resolved by utrace's own loader: {}",
        counts.join(", ")
    );
    Ok(resolved)
}

/// The ifunc choices of utrace's loader in the library `soname`, when utrace maps it.
fn resolve_library(soname: &str) -> Result<Option<ResolvedIfuncs>, IfuncsUnknown> {
    let Some(loaded) = LoadedLibrary::find(soname) else {
        return Ok(None);
    };
    let unreadable = |what: String| IfuncsUnknown::OwnLibraryUnreadable(what);
    let elf = ElfFile::open(&loaded.path)
        .map_err(|error| unreadable(format!("{}: {error}", loaded.path.display())))?;
    let build_id = elf
        .build_id()
        .ok_or_else(|| unreadable(format!("{}, which has no build id", loaded.path.display())))?;
    let implementations = elf
        .exported_ifuncs()
        .into_iter()
        .filter_map(|name| Some((name.to_owned(), loaded.implementation(name)?)))
        .collect::<HashMap<String, u64>>();
    Ok(Some(ResolvedIfuncs {
        path: loaded.path.clone(),
        build_id: build_id.to_vec(),
        implementations,
    }))
}

/// A library utrace's loader has loaded: its handle, path and load bias.
struct LoadedLibrary {
    handle: *mut libc::c_void,
    path: PathBuf,
    load_bias: u64,
}

/// The head of glibc's `struct link_map` (`<link.h>`): the fields it documents first.
#[repr(C)]
struct LinkMapHead {
    l_addr: libc::uintptr_t,
    l_name: *const libc::c_char,
}

impl LoadedLibrary {
    /// The library `soname` if utrace's loader has it loaded already (`RTLD_NOLOAD`: nothing is
    /// loaded, no constructor runs).
    fn find(soname: &str) -> Option<LoadedLibrary> {
        let name = CString::new(soname).ok()?;
        // SAFETY: `name` is a NUL-terminated string that outlives the call; RTLD_NOLOAD only
        // looks the library up.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            return None;
        }
        let mut map: *const LinkMapHead = std::ptr::null();
        // SAFETY: `handle` is a live handle; RTLD_DI_LINKMAP writes one `struct link_map *` into
        // `map`, which is a pointer-sized slot.
        let found = unsafe {
            libc::dlinfo(
                handle,
                libc::RTLD_DI_LINKMAP,
                (&mut map as *mut *const LinkMapHead).cast(),
            )
        };
        if found != 0 || map.is_null() {
            // SAFETY: the handle came from the dlopen above, which took a reference.
            unsafe { libc::dlclose(handle) };
            return None;
        }
        // SAFETY: glibc's link_map begins with l_addr and l_name as `LinkMapHead` declares;
        // the map lives as long as the library stays loaded, which the handle ensures, and
        // l_name is a NUL-terminated path.
        let (load_bias, path) = unsafe {
            let map = &*map;
            let path = CStr::from_ptr(map.l_name).to_string_lossy().into_owned();
            (map.l_addr as u64, PathBuf::from(path))
        };
        Some(LoadedLibrary {
            handle,
            path,
            load_bias,
        })
    }

    /// The virtual address in the library's file of the implementation its loader resolves
    /// the ifunc `name` to; `None` when it resolves elsewhere (glibc's `time` into the vDSO)
    /// or not at all.
    fn implementation(&self, name: &str) -> Option<u64> {
        let symbol = CString::new(name).ok()?;
        // SAFETY: a live handle and a NUL-terminated name; dlsym of an ifunc runs its resolver,
        // which only reads the CPU features the loader recorded.
        let address = unsafe { libc::dlsym(self.handle, symbol.as_ptr()) };
        if address.is_null() {
            return None;
        }
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a valid Dl_info to fill; dladdr only reads the loader's tables.
        if unsafe { libc::dladdr(address, &mut info) } == 0 || info.dli_fname.is_null() {
            return None;
        }
        // SAFETY: dladdr set dli_fname to the NUL-terminated name of a loaded object.
        let file = unsafe { CStr::from_ptr(info.dli_fname) };
        if file.to_string_lossy() != self.path.to_string_lossy() {
            return None;
        }
        (address as u64).checked_sub(self.load_bias)
    }
}

impl Drop for LoadedLibrary {
    fn drop(&mut self) {
        // SAFETY: the handle came from dlopen, which took a reference this gives back; the
        // library stays loaded, as utrace mapped it before.
        unsafe { libc::dlclose(self.handle) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utraces_loader_resolves_libc_ifuncs_into_libc() {
        let resolved = resolve_own_ifuncs().unwrap();
        let libc = resolved
            .iter()
            .find(|l| l.path.file_name().is_some_and(|n| n == "libc.so.6"))
            .expect("utrace maps libc");
        let elf = ElfFile::open(&libc.path).unwrap();
        assert_eq!(Some(libc.build_id.as_slice()), elf.build_id());
        let functions = elf.implementations(&crate::elf::DebugLookup::default(), &libc.path);
        for name in ["memcmp", "strlen", "memset", "strchr", "memcpy"] {
            let address = libc.implementations[name];
            // An implementation (`__memcmp_avx2_movbe`), not the ifunc's resolver.
            let implementations = functions.names_at(address);
            assert!(
                implementations
                    .iter()
                    .any(|found| found.starts_with(&format!("__{name}_"))),
                "{name} at {address:#x}: {implementations:?}"
            );
        }
        // glibc's time and gettimeofday resolve into the vDSO: not into libc.
        assert!(!libc.implementations.contains_key("gettimeofday"));
    }
}
