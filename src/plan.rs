//! The probe plan: the functions that will be traced, numbered densely. A function's id is its
//! index in [`FunctionTable::functions`], which is what the BPF cookie carries and what
//! `utrace.data` stores.

use serde::{Deserialize, Serialize};

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
        let path = self
            .modules
            .get(function.module as usize)
            .map_or("?", String::as_str);
        path.rsplit('/').next().unwrap_or(path)
    }
}
