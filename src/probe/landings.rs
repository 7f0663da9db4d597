//! The PLT calls a plan probes where they land rather than at their stub. A plain list, decided
//! by planning and carried out by `attach.rs`: it knows nothing of BPF.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// PLT calls probed in the library function they land in rather than at their stub (see
/// [`crate::elf::plt_calls`]): the BPF program keeps a hit when its return address follows a
/// direct call of the stub in the executable, whose load bias it finds from the kernel's
/// `mm->start_code` and [`ProbeConfig::executable_code_vaddr`](super::ProbeConfig).
#[derive(Debug, Default)]
pub struct Landings {
    /// Per library (as opened): where its calls land.
    libraries: Vec<(PathBuf, Vec<Landing>)>,
    /// The ids of the stubs probed this way, which get no probe of their own.
    functions: HashSet<u32>,
}

/// Where the calls through one PLT stub land.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Landing {
    /// File offset of the probe site in the library.
    pub offset: usize,
    /// The stub's function id.
    pub function: u32,
    /// The stub's virtual address in the executable (below 4 GiB).
    pub stub: u64,
}

impl Landings {
    /// Probes the calls through the stub of function `id`, at virtual address `stub` in the
    /// executable, at file offset `offset` of `library`.
    pub fn add(&mut self, id: u32, stub: u64, library: &Path, offset: u64) {
        let landing = Landing {
            offset: offset as usize,
            function: id,
            stub,
        };
        match self.libraries.iter_mut().find(|(path, _)| path == library) {
            Some((_, landings)) => landings.push(landing),
            None => self.libraries.push((library.to_owned(), vec![landing])),
        }
        self.functions.insert(id);
    }

    /// How many stubs are probed where their calls land.
    pub fn len(&self) -> usize {
        self.functions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.functions.is_empty()
    }

    /// The ids of the stubs probed where their calls land.
    pub fn functions(&self) -> impl Iterator<Item = u32> + '_ {
        self.functions.iter().copied()
    }

    /// Whether the stub of function `id` is probed where its calls land.
    pub fn contains(&self, id: u32) -> bool {
        self.functions.contains(&id)
    }

    /// Each library (as opened) with the landings in it.
    pub fn libraries(&self) -> impl Iterator<Item = (&Path, &[Landing])> + '_ {
        self.libraries
            .iter()
            .map(|(path, landings)| (path.as_path(), landings.as_slice()))
    }
}
