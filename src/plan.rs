//! The probe plan: the functions that will be traced, numbered densely. A function's id is its
//! index in [`FunctionTable::functions`], which is what the BPF cookie carries and what
//! `utrace.data` stores.

use serde::{Deserialize, Serialize};

use crate::elf::FunctionSymbol;
use crate::filter::{parse_globs, FilterError, Glob};

/// Index into [`FunctionTable::functions`].
pub type FunctionId = u32;

/// What kind of code a traced function is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FunctionKind {
    /// A function symbol from `.symtab` or `.dynsym`.
    Function,
    /// A PLT stub (`name@plt`): a call into a shared library.
    Plt,
}

/// One traced function.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TracedFunction {
    /// Demangled name, as reports show it (`name@plt` for PLT stubs).
    pub name: String,
    /// Index into [`FunctionTable::modules`].
    pub module: u32,
    /// File offset of the probe site in the module (what uprobes attach to).
    pub offset: u64,
    /// Size of the function in bytes (0 where the symbol has none).
    pub size: u64,
    pub kind: FunctionKind,
}

/// The traced functions and the files they live in.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionTable {
    /// Paths of the traced ELF files, as they were opened.
    pub modules: Vec<String>,
    pub functions: Vec<TracedFunction>,
}

impl FunctionTable {
    pub fn function(&self, id: FunctionId) -> Option<&TracedFunction> {
        self.functions.get(id as usize)
    }

    /// The file name of the module a function lives in (`sort` for `/path/to/sort`).
    pub fn module_name(&self, function: &TracedFunction) -> &str {
        file_name(
            self.modules
                .get(function.module as usize)
                .map_or("?", String::as_str),
        )
    }
}

impl FunctionTable {
    /// Adds every function of one traced file; each gets the next free id.
    pub fn add_module(&mut self, path: String, symbols: Vec<FunctionSymbol>) {
        let module = self.modules.len() as u32;
        self.modules.push(path);
        self.functions
            .extend(symbols.into_iter().map(|symbol| TracedFunction {
                name: symbol.name,
                module,
                offset: symbol.offset,
                size: symbol.size,
                kind: symbol.kind,
            }));
    }
}

/// Globs on library file names (`--nest-lib`): repeatable, each a comma-separated list.
#[derive(Debug, Default)]
pub struct LibraryPatterns {
    globs: Vec<Glob>,
}

impl LibraryPatterns {
    pub fn parse(flag: &'static str, arguments: &[String]) -> Result<LibraryPatterns, FilterError> {
        Ok(LibraryPatterns {
            globs: parse_globs(flag, arguments)?,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.globs.is_empty()
    }

    /// Whether the file name of `path` matches one of the globs.
    pub fn matches(&self, path: &str) -> bool {
        let name = file_name(path);
        self.globs.iter().any(|glob| glob.matches(name))
    }

    /// The globs that match none of `paths`, as the user wrote them.
    pub fn unmatched<'a>(&'a self, paths: &[&str]) -> Vec<&'a str> {
        self.globs
            .iter()
            .filter(|glob| !paths.iter().any(|p| glob.matches(file_name(p))))
            .map(Glob::as_str)
            .collect()
    }
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn symbol(name: &str, offset: u64) -> FunctionSymbol {
        FunctionSymbol {
            name: name.into(),
            address: offset + 0x1000,
            offset,
            size: 8,
            kind: FunctionKind::Function,
            site: crate::elf::ProbeSite::ENTRY,
            plt_symbol: None,
        }
    }

    #[test]
    fn ids_are_dense_across_modules() {
        let mut table = FunctionTable::default();
        table.add_module(
            "/bin/prog".into(),
            vec![symbol("main", 16), symbol("f", 32)],
        );
        table.add_module("/lib/libx.so".into(), vec![symbol("g", 48)]);
        let g = table.function(2).unwrap();
        assert_eq!((g.name.as_str(), g.module, g.offset), ("g", 1, 48));
        assert_eq!(table.module_name(g), "libx.so");
        assert_eq!(table.module_name(table.function(0).unwrap()), "prog");
        assert!(table.function(3).is_none());
    }

    #[test]
    fn library_globs_match_file_names() {
        let patterns =
            LibraryPatterns::parse("--nest-lib", &["libc.so*,libm*".into(), "libx.so".into()])
                .unwrap();
        assert!(patterns.matches("/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(patterns.matches("libm.so.6"));
        assert!(!patterns.matches("/usr/lib/libcrypt.so.1"));
        assert_eq!(
            patterns.unmatched(&["/lib/libc.so.6", "/lib/libm.so.6"]),
            ["libx.so"]
        );
        assert!(matches!(
            LibraryPatterns::parse("--nest-lib", &["lib[c".into()]),
            Err(FilterError::Glob { .. })
        ));
    }
}
