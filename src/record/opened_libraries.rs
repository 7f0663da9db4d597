//! The target's probes in the libraries it opens with dlopen and closes with dlclose: each open
//! of a library `--nest-lib` matches gets probes, whether the library was open before or not,
//! and each close releases them.

use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::probe::AttachedProbes;

/// What the target is probed for, among the files it maps.
pub struct OpenedLibraries {
    /// Modules probed for the target's whole run: the files of its program (loaded with it, or
    /// mapped when utrace attached), and those a followed exec brought.
    lasting: Vec<usize>,
    /// The libraries it opened with dlopen, by module, with their probes.
    opened: Vec<(usize, AttachedProbes)>,
    /// Releases under way of closed libraries' probes, with their modules: each ends before its
    /// libraries are probed again, so that a library opened again never has two sets of probes
    /// (each call counted twice).
    releases: Vec<(Vec<usize>, JoinHandle<Duration>)>,
}

/// What changed since the last look at the target's libraries.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LibraryChanges {
    /// Mapped now and not probed: each module with the path that opens its file where it is.
    pub opened: Vec<(usize, PathBuf)>,
    /// Probed as opened with dlopen, and no longer mapped.
    pub closed: Vec<usize>,
}

impl OpenedLibraries {
    pub fn new(lasting: Vec<usize>) -> OpenedLibraries {
        OpenedLibraries {
            lasting,
            opened: Vec::new(),
            releases: Vec::new(),
        }
    }

    /// The target is probed for `modules` until it ends (`--follow`: the program it exec'ed),
    /// those it opened with dlopen aside.
    pub fn add_lasting(&mut self, modules: &[usize]) {
        let opened = |module: &&usize| self.opened.iter().any(|(m, _)| m == *module);
        let lasting: Vec<usize> = modules.iter().filter(|m| !opened(m)).copied().collect();
        self.lasting.extend(lasting);
    }

    /// Of `mapped` (the modules of the libraries `--nest-lib` matches that the target maps now,
    /// each with the path that opens it there), those to probe and those to release.
    pub fn changes(&self, mapped: &[(usize, PathBuf)]) -> LibraryChanges {
        let is_probed = |module: &usize| {
            self.lasting.contains(module) || self.opened.iter().any(|(m, _)| m == module)
        };
        let is_mapped = |module: &usize| mapped.iter().any(|(m, _)| m == module);
        LibraryChanges {
            opened: (mapped.iter())
                .filter(|(module, _)| !is_probed(module))
                .cloned()
                .collect(),
            closed: (self.opened.iter())
                .map(|(module, _)| *module)
                .filter(|module| !is_mapped(module))
                .collect(),
        }
    }

    /// Releases the probes of the libraries `closed`, on a thread of their own (a release waits
    /// for RCU grace periods).
    pub fn release(&mut self, closed: &[usize]) {
        let (released, kept) = std::mem::take(&mut self.opened)
            .into_iter()
            .partition(|(module, _)| closed.contains(module));
        self.opened = kept;
        let (modules, sets): (Vec<usize>, Vec<AttachedProbes>) = released.into_iter().unzip();
        if !sets.is_empty() {
            let release = std::thread::spawn(move || AttachedProbes::detach(sets));
            self.releases.push((modules, release));
        }
    }

    /// Waits until the probes `module` had when it was last closed are released.
    pub fn wait_for_release(&mut self, module: usize) {
        let (of_module, others) = std::mem::take(&mut self.releases)
            .into_iter()
            .partition(|(modules, _)| modules.contains(&module));
        self.releases = others;
        for (_, release) in of_module {
            let _ = release.join();
        }
    }

    /// `module` is opened and probed with `probes` (attached after [`Self::wait_for_release`]).
    pub fn add(&mut self, module: usize, probes: AttachedProbes) {
        self.opened.push((module, probes));
    }

    /// The probes of the libraries open now, once the releases under way are done.
    pub fn end(self) -> Vec<AttachedProbes> {
        for (_, release) in self.releases {
            let _ = release.join();
        }
        self.opened.into_iter().map(|(_, probes)| probes).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(module: usize) -> (usize, PathBuf) {
        (module, PathBuf::from(format!("/proc/1/map_files/{module}")))
    }

    #[test]
    fn a_library_opened_again_is_probed_again_and_a_closed_one_released() {
        let mut libraries = OpenedLibraries::new(vec![0, 1]);
        // The program's own files stay probed; a library opened is probed.
        let first = libraries.changes(&[at(0), at(1), at(2)]);
        assert_eq!(
            first,
            LibraryChanges {
                opened: vec![at(2)],
                closed: vec![]
            }
        );
        libraries.add(2, AttachedProbes::default());
        assert_eq!(
            libraries.changes(&[at(0), at(2)]),
            LibraryChanges::default()
        );
        // Closed, and another library in its place.
        let closed = libraries.changes(&[at(0), at(1), (3, at(2).1)]);
        assert_eq!(closed.opened, [(3, at(2).1)]);
        assert_eq!(closed.closed, [2]);
        libraries.release(&closed.closed);
        libraries.add(3, AttachedProbes::default());
        // Opened again elsewhere: probed again, where it is now.
        let again = libraries.changes(&[at(0), at(1), (2, at(4).1), (3, at(2).1)]);
        assert_eq!(again.opened, [(2, at(4).1)]);
        assert!(again.closed.is_empty());
        assert!(libraries.end().len() == 1);
    }

    #[test]
    fn the_files_of_the_program_are_never_released() {
        let mut libraries = OpenedLibraries::new(vec![0, 1]);
        libraries.add_lasting(&[5]);
        let changes = libraries.changes(&[at(0)]);
        assert_eq!(changes, LibraryChanges::default());
    }
}
