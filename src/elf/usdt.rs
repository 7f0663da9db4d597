//! USDT probes (`<sys/sdt.h>`, SystemTap's static probes): the `.note.stapsdt` notes of a file,
//! one per probe site, each naming its provider and probe, its address, its semaphore (a
//! counter the program reads to skip preparing the arguments when no tracer listens) and the
//! assembler operands of its arguments (`-4@%edi 8@-16(%rbp)`). Attaching is libbpf's (which
//! decodes the operands and sets the semaphores); this is for listing and planning.

use goblin::elf::Elf;

/// The note section's name and the note's type and owner, as `<sys/sdt.h>` writes them.
const NOTE_SECTION: &str = ".note.stapsdt";
const NOTE_TYPE: u32 = 3;
const NOTE_OWNER: &str = "stapsdt";

/// One probe site of a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsdtNote {
    pub provider: String,
    pub name: String,
    /// The site's virtual address in the file, as linked.
    pub address: u64,
    /// The semaphore's virtual address in the file; 0 when the probe has none.
    pub semaphore: u64,
    /// The arguments' operands, `SIZE@OPERAND` separated by spaces (empty: no argument).
    pub arguments: String,
}

impl UsdtNote {
    /// How many arguments the probe passes.
    pub fn argument_count(&self) -> usize {
        self.arguments.split_whitespace().count()
    }
}

/// The USDT notes of the parsed file `elf` (its bytes `bytes`), in the order the file has them;
/// none when it has no `.note.stapsdt`. A note that does not decode is skipped.
pub fn notes(elf: &Elf, bytes: &[u8]) -> Vec<UsdtNote> {
    let Some(sections) = elf.iter_note_sections(bytes, Some(NOTE_SECTION)) else {
        return Vec::new();
    };
    sections
        .filter_map(Result::ok)
        .filter(|note| note.n_type == NOTE_TYPE && note.name == NOTE_OWNER)
        .filter_map(|note| decode(note.desc))
        .collect()
}

/// A note's descriptor: the site, `.stapsdt.base`'s address and the semaphore's (8 bytes each
/// in a 64-bit file), then three NUL-terminated strings: provider, name, arguments.
fn decode(desc: &[u8]) -> Option<UsdtNote> {
    let word = |index: usize| -> Option<u64> {
        let bytes = desc.get(index * 8..index * 8 + 8)?;
        Some(u64::from_le_bytes(bytes.try_into().ok()?))
    };
    let address = word(0)?;
    let semaphore = word(2)?;
    let mut strings = desc.get(24..)?.split(|&byte| byte == 0);
    let mut next =
        || -> Option<String> { Some(String::from_utf8_lossy(strings.next()?).into_owned()) };
    let provider = next()?;
    let name = next()?;
    let arguments = next().unwrap_or_default();
    (!provider.is_empty() && !name.is_empty()).then_some(UsdtNote {
        provider,
        name,
        address,
        semaphore,
        arguments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn descriptor(address: u64, semaphore: u64, strings: &[&str]) -> Vec<u8> {
        let mut desc = Vec::new();
        for word in [address, 0x2000, semaphore] {
            desc.extend(word.to_le_bytes());
        }
        for text in strings {
            desc.extend(text.as_bytes());
            desc.push(0);
        }
        desc
    }

    #[test]
    fn a_note_gives_its_provider_name_address_semaphore_and_arguments() {
        let desc = descriptor(0x1139, 0x4010, &["myapp", "tick", "-4@%edi 8@%rsi"]);
        let note = decode(&desc).unwrap();
        assert_eq!(note.provider, "myapp");
        assert_eq!(note.name, "tick");
        assert_eq!((note.address, note.semaphore), (0x1139, 0x4010));
        assert_eq!(note.arguments, "-4@%edi 8@%rsi");
        assert_eq!(note.argument_count(), 2);
    }

    #[test]
    fn a_probe_without_arguments_or_semaphore() {
        let note = decode(&descriptor(0x1000, 0, &["p", "start", ""])).unwrap();
        assert_eq!((note.semaphore, note.argument_count()), (0, 0));
    }

    #[test]
    fn a_cut_note_is_skipped() {
        assert_eq!(decode(&[0; 20]), None);
        assert_eq!(decode(&descriptor(1, 0, &[])), None);
    }
}
