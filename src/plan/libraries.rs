//! Which libraries are traced: their own functions (`--nest-lib`), and the PLT calls into them
//! (`--lib`, `--no-lib`, `--libname`).

use crate::elf::binding::BindingScope;
use crate::elf::FunctionSymbol;
use crate::filter::{parse_globs, FilterError, Glob};
use crate::table::{file_name, FunctionKind};

/// Globs on library file names (`--nest-lib`): repeatable, each a comma-separated list.
#[derive(Clone, Debug, Default)]
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

/// Which PLT stubs are traced, and how they are named, by the library each calls into
/// (`--lib`, `--no-lib`, `--libname`). A stub calls into the library the dynamic loader binds
/// its symbol to (see [`crate::elf::binding`]).
#[derive(Clone, Debug, Default)]
pub struct PltLibraries {
    /// `--lib`: only the stubs into these libraries; unresolved stubs go too.
    pub only: LibraryPatterns,
    /// `--no-lib`: not the stubs into these libraries.
    pub except: LibraryPatterns,
    /// `--libname`: `name@libc.so.6` rather than `name@plt`.
    pub name_by_library: bool,
}

impl PltLibraries {
    /// Whether any flag asks for the library of a stub: without one, no library is read.
    pub fn is_active(&self) -> bool {
        !self.only.is_empty() || !self.except.is_empty() || self.name_by_library
    }

    /// The functions of the traced file `path`, its PLT stubs kept, dropped and named by the
    /// library of `scope` each one binds to. A stub of the file's own ifunc binds to the file;
    /// a stub no object defines stays `name@plt`, and is dropped only under `--lib`.
    pub fn apply(
        &self,
        path: &str,
        symbols: Vec<FunctionSymbol>,
        scope: &BindingScope,
    ) -> Vec<FunctionSymbol> {
        if !self.is_active() {
            return symbols;
        }
        symbols
            .into_iter()
            .filter_map(|mut symbol| {
                if symbol.kind != FunctionKind::Plt {
                    return Some(symbol);
                }
                let library = match &symbol.plt_symbol {
                    Some(raw) => scope.library_of(raw),
                    None => Some(path),
                };
                if !self.traces_calls_into(library) {
                    return None;
                }
                if let (true, Some(library)) = (self.name_by_library, library) {
                    let target = symbol.name.strip_suffix("@plt").unwrap_or(&symbol.name);
                    symbol.name = format!("{target}@{}", file_name(library));
                }
                Some(symbol)
            })
            .collect()
    }

    /// Whether the calls into `library` (`None`: bound to no file) are traced.
    pub fn traces_calls_into(&self, library: Option<&str>) -> bool {
        match library {
            Some(library) => {
                (self.only.is_empty() || self.only.matches(library))
                    && !self.except.matches(library)
            }
            None => self.only.is_empty(),
        }
    }

    /// The patterns that match none of `libraries`, each with its flag, as the user wrote them.
    pub fn unmatched<'a>(&'a self, libraries: &[&str]) -> Vec<(&'static str, &'a str)> {
        let only = self.only.unmatched(libraries).into_iter();
        let except = self.except.unmatched(libraries).into_iter();
        only.map(|glob| ("--lib", glob))
            .chain(except.map(|glob| ("--no-lib", glob)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::symbol;

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

    fn stub(name: &str, raw: Option<&str>, offset: u64) -> FunctionSymbol {
        FunctionSymbol {
            name: format!("{name}@plt"),
            kind: FunctionKind::Plt,
            plt_symbol: raw.map(str::to_owned),
            ..symbol(name, offset)
        }
    }

    /// `prog` calls cos (libm), strtol (libc), a mangled C++ function (libstdc++), a function
    /// no library defines, and its own ifunc.
    fn program() -> (BindingScope, Vec<FunctionSymbol>) {
        let mut scope = BindingScope::default();
        let exports = |names: &[&str]| names.iter().map(|n| n.to_string()).collect();
        scope.push("/bin/prog".into(), exports(&[]));
        scope.push("/lib/libm.so.6".into(), exports(&["cos"]));
        // libc defines cos too, but libm comes first.
        scope.push("/lib/libc.so.6".into(), exports(&["strtol", "cos"]));
        scope.push("/lib/libstdc++.so.6".into(), exports(&["_Znwm"]));
        let symbols = vec![
            symbol("main", 0),
            stub("cos", Some("cos"), 16),
            stub("strtol", Some("strtol"), 32),
            stub("operator new(unsigned long)", Some("_Znwm"), 48),
            stub("vanished", Some("vanished"), 64),
            stub("memcpy", None, 80),
        ];
        (scope, symbols)
    }

    fn planned(libraries: &PltLibraries) -> Vec<String> {
        let (scope, symbols) = program();
        libraries
            .apply("/bin/prog", symbols, &scope)
            .into_iter()
            .map(|f| f.name)
            .collect()
    }

    fn libraries(only: &str, except: &str, name_by_library: bool) -> PltLibraries {
        let patterns = |flag, text: &str| {
            let list = if text.is_empty() {
                vec![]
            } else {
                vec![text.to_owned()]
            };
            LibraryPatterns::parse(flag, &list).unwrap()
        };
        PltLibraries {
            only: patterns("--lib", only),
            except: patterns("--no-lib", except),
            name_by_library,
        }
    }

    #[test]
    fn stubs_are_kept_by_the_library_they_bind_to() {
        let all = [
            "main",
            "cos@plt",
            "strtol@plt",
            "operator new(unsigned long)@plt",
            "vanished@plt",
            "memcpy@plt",
        ];
        assert_eq!(planned(&PltLibraries::default()), all);
        // Unresolved stubs go under --lib; the program's own ifunc binds to the program.
        assert_eq!(planned(&libraries("libm*", "", false)), ["main", "cos@plt"]);
        assert_eq!(
            planned(&libraries("libm*,prog", "", false)),
            ["main", "cos@plt", "memcpy@plt"]
        );
        assert_eq!(
            planned(&libraries("", "libc.*", false)),
            [
                "main",
                "cos@plt",
                "operator new(unsigned long)@plt",
                "vanished@plt",
                "memcpy@plt"
            ]
        );
        assert_eq!(
            planned(&libraries("lib*", "libstdc++*", false)),
            ["main", "cos@plt", "strtol@plt"]
        );
    }

    #[test]
    fn libname_names_stubs_after_their_library() {
        assert_eq!(
            planned(&libraries("", "", true)),
            [
                "main",
                "cos@libm.so.6",
                "strtol@libc.so.6",
                "operator new(unsigned long)@libstdc++.so.6",
                "vanished@plt",
                "memcpy@prog",
            ]
        );
    }

    #[test]
    fn patterns_that_match_no_library_are_named_with_their_flag() {
        let libraries = libraries("libm*,libz*", "libq*", false);
        assert_eq!(
            libraries.unmatched(&["/lib/libm.so.6", "/lib/libc.so.6"]),
            [("--lib", "libz*"), ("--no-lib", "libq*")]
        );
        assert!(libraries.is_active());
        assert!(!PltLibraries::default().is_active());
    }
}
