//! Where the strings lie that the probes could not read (`string_places`, filled by
//! src/bpf/values.bpf.h where the kernel has `bpf_find_vma`): the recorder looks each up as it
//! meets its event, and reads the string from there.

use libbpf_rs::{MapCore, MapFlags, MapHandle};

use super::interface::skel::types;
use super::user_stacks::kernel_device_to_user;
use super::{LoadedProbes, ProbeError};

// SAFETY: both are plain integers without padding (interface.h lays them out so), any bytes a
// valid value.
unsafe impl plain::Plain for types::string_place_key {}
unsafe impl plain::Plain for types::string_place {}

/// Where an unread string lies, as the probe found it in the process's memory map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StringPlace {
    /// In a file mapping nothing has written to: the file holds it, at `offset`.
    InFile {
        /// As `stat` gives it.
        device: u64,
        inode: u64,
        offset: u64,
    },
    /// In memory only the process holds.
    InMemory,
    /// No mapping holds the address.
    NotMapped,
}

/// The map of places, open on its own (it outlives the borrow of the loaded probes).
pub struct StringPlaces {
    map: MapHandle,
}

impl StringPlaces {
    /// Where the string at `address` of process `pid` lies, if a probe placed it.
    pub fn find(&self, pid: u32, address: u64) -> Option<StringPlace> {
        let key = types::string_place_key {
            tgid: pid,
            address,
            ..Default::default()
        };
        // SAFETY: `string_place_key` is plain old data (above).
        let key = unsafe { plain::as_bytes(&key) };
        let bytes = self.map.lookup(key, MapFlags::ANY).ok().flatten()?;
        let mut place = types::string_place::default();
        plain::copy_from_bytes(&mut place, &bytes).ok()?;
        match types::string_place_kind(place.kind) {
            types::string_place_kind::STRING_IN_FILE => Some(StringPlace::InFile {
                device: kernel_device_to_user(place.device),
                inode: place.inode,
                offset: place.offset,
            }),
            types::string_place_kind::STRING_IN_MEMORY => Some(StringPlace::InMemory),
            types::string_place_kind::STRING_NOT_MAPPED => Some(StringPlace::NotMapped),
            _ => None,
        }
    }
}

impl LoadedProbes<'_> {
    /// The places of the strings the probes could not read.
    pub fn string_places(&self) -> Result<StringPlaces, ProbeError> {
        let map =
            MapHandle::try_from(&self.skel.maps.string_places).map_err(ProbeError::StringPlaces)?;
        Ok(StringPlaces { map })
    }
}
