//! `--stack`: the stacks the probes unwound, symbolized once the recording ends. The kernel
//! stored each user frame as a file's build id and an offset in that file, and the probe the
//! caller's return address as a file's device and inode and an offset (see
//! src/bpf/stacks.bpf.h), so the process need not be alive: the files are found among those the
//! program was planned with and those its memory map showed while it ran, and their symbols read
//! with blazesym (ELF `.symtab` and `.dynsym`); kernel frames (kernel events) from
//! `/proc/kallsyms`, also with blazesym.
//!
//! A stack's frames, innermost first: the kernel's (named `NAME_[k]`, as flamegraph.pl marks
//! them), then the user frames: where the probe hit, the caller, the frame pointer chain, and a
//! `[truncated]` frame where the chain went on beyond the frames kept.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use blazesym::symbolize::source::{Elf, Kernel, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use blazesym::MaybeDefault;

use crate::elf::demangle;
use crate::plan::KERNEL_MODULE;
use crate::probe::{RawCaller, RawFrame, RawStack};
use crate::table::FunctionTable;
use crate::user_stack::{StackFrame, UserStack, UserStacks, KERNEL_FRAME_SUFFIX, TRUNCATED};

/// The build id's bytes as the kernel keeps them (shorter ids padded with zeros).
const KERNEL_BUILD_ID_SIZE: usize = 20;

/// The stacks of a recording, with the frames of `raw` symbolized against `files`.
pub fn symbolize(table: &FunctionTable, raw: Vec<RawStack>, files: &[PathBuf]) -> UserStacks {
    let functions = table
        .functions
        .iter()
        .enumerate()
        .filter(|(_, function)| function.user_stack)
        .map(|(id, _)| id as u32)
        .collect();
    let files = StackFiles {
        by_build_id: files_by_build_id(files),
        by_inode: files_by_inode(files),
    };
    let symbolizer = Symbolizer::new();
    let stacks = raw
        .into_iter()
        .map(|raw| UserStack {
            id: raw.id,
            frames: stack_frames(&symbolizer, &files, &raw),
        })
        .collect();
    UserStacks { functions, stacks }
}

/// Where the frames' files are.
struct StackFiles {
    by_build_id: HashMap<Vec<u8>, PathBuf>,
    /// By (device, inode), as `stat` gives them.
    by_inode: HashMap<(u64, u64), PathBuf>,
}

/// The frames of `raw`, innermost first.
fn stack_frames(symbolizer: &Symbolizer, files: &StackFiles, raw: &RawStack) -> Vec<StackFrame> {
    let mut frames = kernel_frames(symbolizer, &raw.kernel);
    let truncated = raw.user.len() > USER_STACK_FRAMES;
    let user = &raw.user[..raw.user.len().min(USER_STACK_FRAMES)];
    let mut user: Vec<StackFrame> = user
        .iter()
        .enumerate()
        .map(|(depth, frame)| symbolize_frame(symbolizer, &files.by_build_id, depth, frame))
        .collect();
    if let (Some(caller), Some(first)) = (&raw.caller, raw.user.first()) {
        let frame = caller_frame(symbolizer, files, caller);
        let known = match raw.kernel_event {
            // At a system call the chain may start at the caller already: when the C library's
            // wrapper made a frame of its own.
            true => user.get(1) == Some(&frame),
            false => kernel_took_caller(files, first),
        };
        if !known {
            user.insert(1, frame);
        }
    }
    frames.extend(user);
    if truncated {
        frames.push(StackFrame {
            module: None,
            symbol: Some(TRUNCATED.to_owned()),
            offset: 0,
        });
    }
    frames
}

/// Whether the kernel put the caller's return address in the stack itself: it does where the
/// probed instruction is a `push %rbp` or an `endbr64` (`first`, the probe's own frame, says
/// where that is).
fn kernel_took_caller(files: &StackFiles, first: &RawFrame) -> bool {
    let RawFrame::InFile { build_id, offset } = first else {
        return false;
    };
    let Some(path) = files.by_build_id.get(build_id) else {
        return false;
    };
    let mut bytes = [0; 4];
    let read = File::open(path).and_then(|file| file.read_exact_at(&mut bytes, *offset));
    read.is_ok() && (bytes[0] == PUSH_RBP || bytes == ENDBR64)
}

/// `push %rbp` and `endbr64`: the instructions where the kernel's unwinder takes the caller's
/// return address from the top of the stack.
const PUSH_RBP: u8 = 0x55;
const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// Frames kept per stack (stacks.bpf.h's USER_STACK_FRAMES): the map keeps one more, which says
/// that the stack went on.
const USER_STACK_FRAMES: usize = 64;

/// The caller's frame, from its return address.
fn caller_frame(symbolizer: &Symbolizer, files: &StackFiles, caller: &RawCaller) -> StackFrame {
    let Some(path) = files.by_inode.get(&(caller.device, caller.inode)) else {
        return StackFrame {
            module: None,
            symbol: None,
            offset: caller.offset,
        };
    };
    return_address_frame(symbolizer, path, caller.offset)
}

/// The kernel frames of `addresses` (innermost first), named from `/proc/kallsyms`.
fn kernel_frames(symbolizer: &Symbolizer, addresses: &[u64]) -> Vec<StackFrame> {
    if addresses.is_empty() {
        return Vec::new();
    }
    let addresses = &addresses[..addresses.len().min(USER_STACK_FRAMES)];
    // Return addresses follow their call: the byte before names the caller.
    let before: Vec<u64> = addresses.iter().map(|a| a.saturating_sub(1)).collect();
    let source = Source::Kernel(Kernel {
        vmlinux: MaybeDefault::None,
        debug_syms: false,
        ..Kernel::default()
    });
    let symbols = symbolizer
        .symbolize(&source, Input::AbsAddr(&before))
        .unwrap_or_else(|error| {
            log::debug!("--stack: cannot symbolize kernel addresses: {error}");
            Vec::new()
        });
    let probe_frames = symbols
        .iter()
        .take_while(|symbolized| match symbolized {
            Symbolized::Sym(sym) => is_probe_machinery(&sym.name),
            Symbolized::Unknown(_) => false,
        })
        .count();
    addresses
        .iter()
        .enumerate()
        .skip(probe_frames)
        .map(|(index, &address)| match symbols.get(index) {
            Some(Symbolized::Sym(sym)) => StackFrame {
                module: Some(KERNEL_MODULE.to_owned()),
                symbol: Some(format!("{}{KERNEL_FRAME_SUFFIX}", sym.name)),
                offset: sym.offset as u64 + 1,
            },
            _ => StackFrame {
                module: Some(KERNEL_MODULE.to_owned()),
                symbol: None,
                offset: address,
            },
        })
        .collect()
}

/// Whether kernel function `name` is the tracepoint's way into utrace's own program (the
/// innermost frames of a kernel event's stack, which say nothing of what the program did).
fn is_probe_machinery(name: &str) -> bool {
    ["bpf_prog_", "bpf_trace_run", "__bpf_trace_", "__traceiter_"]
        .iter()
        .any(|prefix| name.starts_with(prefix))
}

/// The files of `files` by (device, inode).
fn files_by_inode(files: &[PathBuf]) -> HashMap<(u64, u64), PathBuf> {
    let mut found = HashMap::new();
    for path in files {
        if let Ok(metadata) = std::fs::metadata(path) {
            found
                .entry((metadata.dev(), metadata.ino()))
                .or_insert_with(|| path.clone());
        }
    }
    found
}

/// The files of `files` that have a build id, by that id as the kernel keeps it.
fn files_by_build_id(files: &[PathBuf]) -> HashMap<Vec<u8>, PathBuf> {
    let mut found = HashMap::new();
    for path in files {
        match blazesym::helper::read_elf_build_id(path) {
            Ok(Some(id)) => {
                let mut key = id.to_vec();
                key.resize(KERNEL_BUILD_ID_SIZE.max(key.len()), 0);
                found.entry(key).or_insert_with(|| path.clone());
            }
            Ok(None) => log::debug!("--stack: {} has no build id", path.display()),
            Err(error) => log::debug!("--stack: cannot read {}: {error}", path.display()),
        }
    }
    found
}

/// One frame, named: `depth` 0 is where the probe hit; the others are return addresses, which
/// follow their call, so the byte before them is symbolized (a call may be a function's last
/// instruction).
fn symbolize_frame(
    symbolizer: &Symbolizer,
    files: &HashMap<Vec<u8>, PathBuf>,
    depth: usize,
    frame: &RawFrame,
) -> StackFrame {
    let (build_id, offset) = match frame {
        RawFrame::InFile { build_id, offset } => (build_id, *offset),
        RawFrame::Address(address) => {
            return StackFrame {
                module: None,
                symbol: None,
                offset: *address,
            }
        }
    };
    let Some(path) = files.get(build_id) else {
        return StackFrame {
            module: None,
            symbol: None,
            offset,
        };
    };
    match depth {
        0 => code_frame(symbolizer, path, offset, 0),
        _ => return_address_frame(symbolizer, path, offset),
    }
}

/// The frame of return address `offset` in `path`: the byte before is symbolized (a call may
/// be a function's last instruction).
fn return_address_frame(symbolizer: &Symbolizer, path: &Path, offset: u64) -> StackFrame {
    code_frame(symbolizer, path, offset, 1)
}

/// The frame of file offset `offset` in `path`, symbolized `back` bytes before.
fn code_frame(symbolizer: &Symbolizer, path: &Path, offset: u64, back: u64) -> StackFrame {
    let symbol = symbol_at(symbolizer, path, offset.saturating_sub(back));
    StackFrame {
        module: Some(path.to_string_lossy().into_owned()),
        offset: match &symbol {
            Some((_, from_start)) => from_start + back,
            None => offset,
        },
        symbol: symbol.map(|(name, _)| name),
    }
}

/// The symbol at file offset `offset` of `path` and the offset from its start.
fn symbol_at(symbolizer: &Symbolizer, path: &Path, offset: u64) -> Option<(String, u64)> {
    // The symbol tables only: a separate debug file adds nothing a frame's name needs.
    let source = Source::Elf(Elf {
        debug_syms: false,
        ..Elf::new(path)
    });
    let found = symbolizer.symbolize_single(&source, Input::FileOffset(offset));
    match found {
        Ok(Symbolized::Sym(sym)) => Some((demangle(&sym.name), sym.offset as u64)),
        Ok(Symbolized::Unknown(_)) => None,
        Err(error) => {
            log::debug!("--stack: cannot symbolize {}: {error}", path.display());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tracepoints_way_into_the_bpf_program_is_left_out() {
        for name in [
            "bpf_prog_372cad73d7ec5d35_syscall_entered",
            "bpf_trace_run2",
            "__bpf_trace_sys_enter",
            "__traceiter_sched_switch",
        ] {
            assert!(is_probe_machinery(name), "{name}");
        }
        for name in ["syscall_trace_enter", "do_syscall_64", "__schedule"] {
            assert!(!is_probe_machinery(name), "{name}");
        }
    }
}
