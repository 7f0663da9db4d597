//! The shared vocabulary of the traced functions: [`FunctionId`], [`TracedFunction`] and the
//! [`FunctionTable`] that numbers them densely. A function's id is its index in
//! [`FunctionTable::functions`], which is what the BPF cookie carries and what `utrace.data`
//! stores. Imports nothing of the project but the values vocabulary: every layer may use it.

use serde::{Deserialize, Serialize};

use crate::value::ValueSpec;

/// Index into [`FunctionTable::functions`].
pub type FunctionId = u32;

/// The pseudo-function of a thread's time off the CPU (uftrace's name), of kind
/// [`FunctionKind::Kernel`].
pub const OFF_CPU_FUNCTION: &str = "linux:schedule";

/// The pseudo-function of a thread's time preempted (off the CPU, still runnable), of kind
/// [`FunctionKind::Preemption`].
pub const PREEMPTION_FUNCTION: &str = "linux:preempted";

/// What kind of code a traced function is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FunctionKind {
    /// A function symbol from `.symtab` or `.dynsym`.
    Function,
    /// A PLT stub (`name@plt`): a call into a shared library.
    Plt,
    /// The calls through a GOT slot (`name@got`): calls into a shared library that take no PLT
    /// stub (`call *slot(%rip)`: `-fno-plt`, Rust). Probed only where they land, in the library.
    Got,
    /// What the kernel did for the thread, shown as a call (`-E`): a system call (`sys_write`),
    /// an interval off the CPU (`linux:schedule`). Module `[kernel]`; not probed as user code.
    Kernel,
    /// A point event (`-E usdt:…`): an entry with its arguments and an exit right after it,
    /// shown as a comment line in the call tree. Not probed as user code.
    Event,
    /// Time utrace itself held the thread stopped (`[utrace: stack repair]`: the shadow stack's
    /// writes for a C++ exception), written by the recorder as a call where it happened. Module
    /// `[utrace]`; not probed. Reports take it out of the calls around it, as probe costs are,
    /// and show it as its own row.
    Tracer,
    /// Time the thread was preempted: off the CPU but still runnable (recorded by default, when
    /// `-E offcpu` is not asked for). Module `[kernel]`; not a call: the replayer takes it out of
    /// the calls it fell in, which count it apart, and no report shows it as a call or a row.
    Preemption,
}

impl FunctionKind {
    /// Whether the function is user code that gets uprobes at its entry and exits.
    pub fn is_probed_code(self) -> bool {
        matches!(self, FunctionKind::Function | FunctionKind::Plt)
    }
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
    /// What decides what its probes cost (see [`crate::probe_cost`]).
    pub probes: ProbeClass,
    /// The arguments and return value its probes capture (`-A`, `-R`), in order. Stored after
    /// the table (see [`FunctionTable::captured_values`]), so tables of files written before
    /// values existed still read.
    #[serde(skip)]
    pub values: Vec<ValueSpec>,
    /// Its entry probe also captures the user stack (`--stack`): the stack's id follows the
    /// arguments (see [`crate::user_stack`]). Stored in the stack table chunk, beside the
    /// stacks, so tables stay as older readers know them.
    #[serde(skip)]
    pub user_stack: bool,
    /// The names of the arguments among `values`, by argument number from 1 ("" where none is
    /// known): kernel functions' from BTF. Stored after the table like `values` (see
    /// [`FunctionTable::argument_names`]).
    #[serde(skip)]
    pub argument_names: Vec<String>,
    /// Where its code starts in the source (`record` reads it from DWARF when the file, or its
    /// debug file, has line tables). Stored after the table like `values` (see
    /// [`FunctionTable::source_lines`]): tables without it read as having none.
    #[serde(skip)]
    pub source: Option<SourceLine>,
    /// When `--budget` took its probes off, and why; stored in a chunk of its own (see
    /// [`crate::data::format`]), so tables stay as older readers know them.
    #[serde(skip)]
    pub detached: Option<Detachment>,
}

/// A function whose probes `--budget` took off during the recording: its calls are counted up
/// to then, and its callers' self times include its calls after.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Detachment {
    pub function: FunctionId,
    /// How long into the recording.
    pub after_ns: u64,
    /// How often it was called then.
    pub calls_per_s: u64,
}

impl TracedFunction {
    /// Whether its calls are a thread's time off the CPU (`-E offcpu`).
    pub fn is_off_cpu(&self) -> bool {
        self.kind == FunctionKind::Kernel && self.name == OFF_CPU_FUNCTION
    }

    /// Whether its events are the time a thread spent preempted, which no report shows as calls.
    pub fn is_preemption(&self) -> bool {
        self.kind == FunctionKind::Preemption
    }
}

/// The source line of a function's entry: the line-table row at its entry address, as
/// `addr2line -e FILE ADDRESS` prints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceLine {
    /// The source file's path relative to the compilation directory where it lies under it
    /// (`test/args.c`), absolute otherwise (`/usr/include/x86_64-linux-gnu/bits/stdio2.h`).
    pub file: String,
    /// 1 for the first line.
    pub line: u32,
}

impl std::fmt::Display for SourceLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// The traced functions and the files they live in.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionTable {
    /// Paths of the traced ELF files, as they were opened.
    pub modules: Vec<String>,
    pub functions: Vec<TracedFunction>,
    /// Where the symbols of each module came from, as `record` found them (`5 functions from
    /// .symtab, 0 from .dynsym, 5 PLT stubs`), by module index; stored after the table
    /// (see [`crate::data::format::encode_table`]), so tables written before have none.
    #[serde(skip)]
    pub symbol_origins: Vec<(u32, String)>,
}

impl FunctionTable {
    pub fn function(&self, id: FunctionId) -> Option<&TracedFunction> {
        self.functions.get(id as usize)
    }

    /// Adds a traced file, whose functions the caller pushes next; returns its module index.
    pub fn push_module(&mut self, path: String) -> u32 {
        self.modules.push(path);
        (self.modules.len() - 1) as u32
    }

    /// Appends the modules and functions of `more`, whose module indices already count on from
    /// this table's (a "more functions" chunk of `utrace.data`).
    pub fn extend(&mut self, more: FunctionTable) {
        self.modules.extend(more.modules);
        self.functions.extend(more.functions);
        self.symbol_origins.extend(more.symbol_origins);
    }

    /// How many functions module `index` has.
    pub fn functions_in_module(&self, index: usize) -> usize {
        let functions = self.functions.iter();
        functions.filter(|f| f.module as usize == index).count()
    }

    /// The name reports show for a function id: `?` for an id the table does not have (a
    /// damaged file).
    pub fn name_of(&self, id: FunctionId) -> &str {
        self.function(id).map_or("?", |f| f.name.as_str())
    }

    /// The functions that capture values, with their specs: what `utrace.data` stores beside
    /// the table.
    pub fn captured_values(&self) -> Vec<(FunctionId, Vec<ValueSpec>)> {
        let functions = self.functions.iter().enumerate();
        functions
            .filter(|(_, function)| !function.values.is_empty())
            .map(|(id, function)| (id as FunctionId, function.values.clone()))
            .collect()
    }

    /// Sets the specs of [`captured_values`](Self::captured_values) read back; ids beyond the
    /// table are ignored.
    pub fn set_captured_values(&mut self, values: Vec<(FunctionId, Vec<ValueSpec>)>) {
        for (id, specs) in values {
            if let Some(function) = self.functions.get_mut(id as usize) {
                function.values = specs;
            }
        }
    }

    /// The functions whose arguments have names, with them: what `utrace.data` stores beside
    /// the table, after the symbol origins.
    pub fn argument_names(&self) -> Vec<(FunctionId, Vec<String>)> {
        let functions = self.functions.iter().enumerate();
        functions
            .filter(|(_, function)| !function.argument_names.is_empty())
            .map(|(id, function)| (id as FunctionId, function.argument_names.clone()))
            .collect()
    }

    /// Sets the [`argument_names`](Self::argument_names) read back; ids beyond the table are
    /// ignored.
    pub fn set_argument_names(&mut self, names: Vec<(FunctionId, Vec<String>)>) {
        for (id, names) in names {
            if let Some(function) = self.functions.get_mut(id as usize) {
                function.argument_names = names;
            }
        }
    }

    /// The functions whose source line is known, with it: what `utrace.data` stores beside the
    /// table, after the captured values.
    pub fn source_lines(&self) -> Vec<(FunctionId, SourceLine)> {
        let functions = self.functions.iter().enumerate();
        functions
            .filter_map(|(id, function)| Some((id as FunctionId, function.source.clone()?)))
            .collect()
    }

    /// Sets the [`source_lines`](Self::source_lines) read back; ids beyond the table are
    /// ignored.
    pub fn set_source_lines(&mut self, lines: Vec<(FunctionId, SourceLine)>) {
        for (id, line) in lines {
            if let Some(function) = self.functions.get_mut(id as usize) {
                function.source = Some(line);
            }
        }
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

/// The file name of `path` (`sort` for `/path/to/sort`).
pub fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// How the kernel runs the instruction under a uprobe. A kernel function's entry (`-k`) counts as
/// emulated: ftrace calls its probe from the function's first instruction, and nothing is stepped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Execution {
    /// Emulated in the trap handler: `push reg`, `nop`, relative `jmp`, `call` and `jcc`.
    #[default]
    Emulated,
    /// Copied out of line and single-stepped: a second trap.
    SingleStepped,
}

/// How a function's exit is seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ExitKind {
    /// A uretprobe: the kernel's trampoline takes the return.
    #[default]
    Uretprobe,
    /// A uprobe on each instruction that leaves the function (`--exit-probes=ret`), measured on
    /// a `ret`, which the kernel single-steps.
    Instruction,
    /// A kernel function's return (`-k`), with its entry probed by the same kprobe_multi link
    /// pair: fprobe's return hook.
    KretprobeMulti,
    /// A kernel function's return (`-k`) by a kretprobe of its own, its entry by a kprobe.
    Kretprobe,
}

/// What decides a function's probe costs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProbeClass {
    /// How the instruction under the entry probe runs.
    pub entry: Execution,
    pub exit: ExitKind,
}

impl ProbeClass {
    /// Every class of user functions, in the order figures are shown.
    pub const USER: [ProbeClass; 4] = [
        ProbeClass::new(Execution::Emulated, ExitKind::Uretprobe),
        ProbeClass::new(Execution::SingleStepped, ExitKind::Uretprobe),
        ProbeClass::new(Execution::Emulated, ExitKind::Instruction),
        ProbeClass::new(Execution::SingleStepped, ExitKind::Instruction),
    ];

    /// A kernel function's probes attached with kprobe_multi links (see [`ExitKind`]).
    pub const KPROBE_MULTI: ProbeClass =
        ProbeClass::new(Execution::Emulated, ExitKind::KretprobeMulti);
    /// A kernel function's probes attached as a kprobe and a kretprobe.
    pub const KPROBES: ProbeClass = ProbeClass::new(Execution::Emulated, ExitKind::Kretprobe);

    pub const fn new(entry: Execution, exit: ExitKind) -> ProbeClass {
        ProbeClass { entry, exit }
    }

    /// Whether the class is a kernel function's (`-k`), not a user function's uprobes.
    pub fn is_kernel(self) -> bool {
        matches!(self.exit, ExitKind::KretprobeMulti | ExitKind::Kretprobe)
    }

    /// How `record -d` and `info` name the class.
    pub fn name(self) -> &'static str {
        match (self.entry, self.exit) {
            (Execution::Emulated, ExitKind::Uretprobe) => "emulated entry, uretprobe",
            (Execution::SingleStepped, ExitKind::Uretprobe) => "single-stepped entry, uretprobe",
            (Execution::Emulated, ExitKind::Instruction) => "emulated entry, probe on ret",
            (Execution::SingleStepped, ExitKind::Instruction) => {
                "single-stepped entry, probe on ret"
            }
            (_, ExitKind::KretprobeMulti) => "kernel function, kprobe_multi",
            (_, ExitKind::Kretprobe) => "kernel function, kprobe and kretprobe",
        }
    }
}

#[cfg(test)]
impl FunctionTable {
    /// A table of one module, `/bin/prog`, whose function ids are the indices of `names`.
    pub fn of_names(names: &[&str]) -> FunctionTable {
        let mut table = FunctionTable::default();
        let module = table.push_module("/bin/prog".into());
        table
            .functions
            .extend(names.iter().map(|name| TracedFunction {
                name: name.to_string(),
                module,
                offset: 0,
                size: 1,
                kind: FunctionKind::Function,
                probes: ProbeClass::default(),
                values: Vec::new(),
                user_stack: false,
                argument_names: Vec::new(),
                source: None,
                detached: None,
            }));
        table
    }
}
