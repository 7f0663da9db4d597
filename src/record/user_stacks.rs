//! `--stack`: the stacks the probes unwound, symbolized once the recording ends. The kernel
//! stored each frame as a file's build id and an offset in that file (see
//! src/bpf/stacks.bpf.h), so the process need not be alive: the files are found among those the
//! program was planned with and those its memory map showed while it ran, by build id, and
//! their symbols read with blazesym (ELF `.symtab` and `.dynsym`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};

use crate::elf::demangle;
use crate::probe::{RawFrame, RawStack};
use crate::table::FunctionTable;
use crate::user_stack::{StackFrame, UserStack, UserStacks};

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
    let by_build_id = files_by_build_id(files);
    let symbolizer = Symbolizer::new();
    let stacks = raw
        .into_iter()
        .map(|(id, frames)| UserStack {
            id,
            frames: frames
                .iter()
                .enumerate()
                .map(|(depth, frame)| symbolize_frame(&symbolizer, &by_build_id, depth, frame))
                .collect(),
        })
        .collect();
    UserStacks { functions, stacks }
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
    let back = u64::from(depth > 0);
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
