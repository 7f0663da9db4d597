//! User stacks unwound at the entry of the functions `record --stack` names: the vocabulary the
//! recorder writes into the stack table chunk and the reports read back.
//!
//! The BPF side stores each distinct stack once and writes its id as the last 8 bytes of the
//! entry's captured values (after the arguments, if any): a signed 64-bit number, the id, or a
//! negative error when no id could be given (the stack map full or a hash collision, a stack
//! with no frame). The recorder symbolizes the frames when the recording ends.

use serde::{Deserialize, Serialize};

use crate::table::FunctionId;

/// The stacks of one recording.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserStacks {
    /// The functions whose entries carry a stack id, ascending.
    pub functions: Vec<FunctionId>,
    /// Each distinct stack, by id.
    pub stacks: Vec<UserStack>,
}

/// One distinct user stack.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserStack {
    /// The id the entries carry.
    pub id: u32,
    /// Innermost first: the traced function's entry, then each return address.
    pub frames: Vec<StackFrame>,
}

/// One frame of a stack.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackFrame {
    /// The file the frame lies in; `None` where the kernel could not tell (anonymous memory, a
    /// file whose build id it could not read) or the recorder found no file with its build id.
    pub module: Option<String>,
    /// The function the frame lies in, when the file's symbols name one.
    pub symbol: Option<String>,
    /// From the symbol's start when there is one, else from the file's start (or the address,
    /// without a file).
    pub offset: u64,
}

/// What kernel frames' names end with, as flamegraph.pl marks them (`do_syscall_64_[k]`).
pub const KERNEL_FRAME_SUFFIX: &str = "_[k]";

/// The outermost frame of a stack cut at the frames kept (`--stack` keeps 64 user frames).
pub const TRUNCATED: &str = "[truncated]";

/// What an entry's stack value says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StackRef {
    /// The stack with this id.
    Id(u32),
    /// No stack: the kernel's error (negative errno).
    Lost(i32),
}

impl StackFrame {
    /// How reports show the frame: the symbol, `[module+0xoff]` without one, `[unknown]` with
    /// neither.
    pub fn name(&self) -> String {
        match (&self.symbol, &self.module) {
            (Some(symbol), _) => symbol.clone(),
            (None, Some(module)) => {
                let file = module.rsplit('/').next().unwrap_or(module);
                format!("[{file}+{:#x}]", self.offset)
            }
            (None, None) => "[unknown]".to_owned(),
        }
    }
}

impl UserStacks {
    /// Whether the entries of `function` carry a stack id.
    pub fn captured_by(&self, function: FunctionId) -> bool {
        self.functions.binary_search(&function).is_ok()
    }

    /// The stack with `id`.
    pub fn stack(&self, id: u32) -> Option<&UserStack> {
        self.stacks
            .binary_search_by_key(&id, |stack| stack.id)
            .ok()
            .map(|at| &self.stacks[at])
    }
}

/// The stack an entry's captured values end with; `None` when they are too short (a damaged
/// file).
pub fn stack_of(arguments: &[u8]) -> Option<StackRef> {
    let (_, last) = arguments.split_last_chunk::<8>()?;
    let value = i64::from_le_bytes(*last);
    Some(match u32::try_from(value) {
        Ok(id) => StackRef::Id(id),
        Err(_) => StackRef::Lost(i32::try_from(value).unwrap_or(i32::MIN)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stack_value_is_the_last_8_bytes() {
        let mut bytes = 7u64.to_le_bytes().to_vec();
        bytes.extend(3i64.to_le_bytes());
        assert_eq!(stack_of(&bytes), Some(StackRef::Id(3)));
        assert_eq!(stack_of(&(-17i64).to_le_bytes()), Some(StackRef::Lost(-17)));
        assert_eq!(stack_of(&[1, 2, 3]), None);
    }

    #[test]
    fn frames_are_named_by_symbol_then_module() {
        let frame = |module: Option<&str>, symbol: Option<&str>| StackFrame {
            module: module.map(str::to_owned),
            symbol: symbol.map(str::to_owned),
            offset: 0x1f,
        };
        assert_eq!(frame(Some("/bin/prog"), Some("main")).name(), "main");
        assert_eq!(
            frame(Some("/lib/libc.so.6"), None).name(),
            "[libc.so.6+0x1f]"
        );
        assert_eq!(frame(None, None).name(), "[unknown]");
    }
}
