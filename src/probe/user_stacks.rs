//! The user stacks the entry probes unwound (`--stack`, src/bpf/stacks.bpf.h), read from their
//! stack map once the recording ends: the map never evicts a stack, so every id an event
//! carries is still there.

use libbpf_rs::{MapCore, MapFlags};

use super::LoadedProbes;

/// One frame as the kernel stored it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RawFrame {
    /// In the file with this build id, at this file offset.
    InFile { build_id: Vec<u8>, offset: u64 },
    /// At this address: the kernel could not place it in a file.
    Address(u64),
}

/// A stack's id and its frames, innermost first.
pub type RawStack = (u32, Vec<RawFrame>);

/// `struct bpf_stack_build_id`: status (i32), build id (20 bytes), then the offset or address.
const FRAME_SIZE: usize = 32;
const BUILD_ID_SIZE: usize = 20;
/// `enum bpf_stack_build_id_status`.
const STATUS_VALID: i32 = 1;
const STATUS_IP: i32 = 2;

impl LoadedProbes<'_> {
    /// Every stack in the map, by id.
    pub fn user_stacks(&self) -> Vec<RawStack> {
        let map = &self.skel.maps.user_stacks;
        let mut stacks: Vec<RawStack> = map
            .keys()
            .filter_map(|key| {
                let id = u32::from_ne_bytes(key.as_slice().try_into().ok()?);
                let value = map.lookup(&key, MapFlags::ANY).ok().flatten()?;
                Some((id, parse_frames(&value)))
            })
            .collect();
        stacks.sort_by_key(|(id, _)| *id);
        stacks
    }
}

/// The frames of a stack map value; they end at the first empty one.
fn parse_frames(value: &[u8]) -> Vec<RawFrame> {
    value
        .chunks_exact(FRAME_SIZE)
        .map_while(|frame| {
            let status = i32::from_ne_bytes(frame[..4].try_into().expect("4 bytes"));
            let word = u64::from_ne_bytes(frame[24..].try_into().expect("8 bytes"));
            match status {
                STATUS_VALID => Some(RawFrame::InFile {
                    build_id: frame[4..4 + BUILD_ID_SIZE].to_vec(),
                    offset: word,
                }),
                STATUS_IP => Some(RawFrame::Address(word)),
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_end_at_the_first_empty_one() {
        let frame = |status: i32, id: u8, word: u64| {
            let mut bytes = status.to_ne_bytes().to_vec();
            bytes.extend([id; BUILD_ID_SIZE]);
            bytes.extend(word.to_ne_bytes());
            bytes
        };
        let mut value = frame(STATUS_VALID, 7, 0x1234);
        value.extend(frame(STATUS_IP, 0, 0x7fff_0000));
        value.extend(frame(0, 0, 0));
        value.extend(frame(STATUS_VALID, 9, 1));
        assert_eq!(
            parse_frames(&value),
            [
                RawFrame::InFile {
                    build_id: vec![7; BUILD_ID_SIZE],
                    offset: 0x1234
                },
                RawFrame::Address(0x7fff_0000),
            ]
        );
    }
}
