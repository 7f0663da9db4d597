//! Demangled names: Rust (legacy and v0) with `rustc-demangle`, C++ with libiberty's
//! demangler, the one `c++filt` runs.
//!
//! C++ names must read exactly as `c++filt` prints them (test/README.md), and no pure-Rust
//! demangler does: `cpp_demangle` 0.5.1 gives up on expressions in template arguments
//! (`enable_if` return types) and prints other names wrong without failing (a repeated
//! parameter dropped, `&` put before `::` of a nested name). libiberty's `cp-demangle.c` is
//! binutils' own, in C (no C++ runtime), reentrant, and its licence lets it be linked into any
//! program. It comes as a static library with Debian's `libiberty-dev`.

use std::ffi::{c_char, c_int, CStr, CString};

/// `demangle.h`: function parameters, `const`/`volatile`, and the standard substitutions in
/// full (`std::basic_string<char, std::char_traits<char>, std::allocator<char> >` for `Ss`):
/// the options `c++filt` passes.
const DMGL_PARAMS: c_int = 1 << 0;
const DMGL_ANSI: c_int = 1 << 1;
const DMGL_VERBOSE: c_int = 1 << 3;
const CPLUSPLUS_FILT_OPTIONS: c_int = DMGL_PARAMS | DMGL_ANSI | DMGL_VERBOSE;

#[link(name = "iberty")]
extern "C" {
    /// The demangled text of a `_Z` (or `_GLOBAL_`) name as a string from `malloc`, or null
    /// when the name is not one it can demangle.
    fn cplus_demangle_v3(mangled: *const c_char, options: c_int) -> *mut c_char;
}

/// The readable name of a symbol, or the symbol itself when it is not mangled or cannot be
/// demangled.
///
/// - Rust legacy (`_ZN...17h<hash>E`) and v0 (`_R...`): the path without the hash or crate
///   disambiguators (`rustc-demangle`'s alternate format).
/// - C++ (`_Z...`): as `c++filt` prints it, GCC clone suffixes included:
///   `foo(int) [clone .constprop.0]`.
/// - A suffix the demanglers reject (`.part.0` after a Rust name, a symbol version `@VERS`):
///   the base is demangled and the suffix kept as it is.
pub fn demangle(raw: &str) -> String {
    if let Some(name) = demangle_whole(raw) {
        return name;
    }
    if let Some(split) = raw.find(['.', '@']).filter(|&split| split > 0) {
        let (base, suffix) = raw.split_at(split);
        if let Some(name) = demangle_whole(base) {
            return format!("{name}{suffix}");
        }
    }
    raw.to_owned()
}

fn demangle_whole(raw: &str) -> Option<String> {
    // A legacy Rust name is also a valid C++ name (`_ZN...E`), so Rust is tried first. The
    // Rust demangler rejects what only C++ can mean (parameters, templates, `const`), and for
    // a plain nested name both give the same path.
    if raw.starts_with("_R") || raw.starts_with("_ZN") {
        if let Ok(name) = rustc_demangle::try_demangle(raw) {
            return Some(format!("{name:#}"));
        }
    }
    if raw.starts_with("_Z") {
        return demangle_cpp(raw);
    }
    None
}

fn demangle_cpp(raw: &str) -> Option<String> {
    let mangled = CString::new(raw).ok()?;
    // SAFETY: `mangled` is NUL-terminated and outlives the call, which only reads it and keeps
    // no pointer into it; the demangler keeps all its state on its own stack, so threads may
    // call it at once.
    let demangled = unsafe { cplus_demangle_v3(mangled.as_ptr(), CPLUSPLUS_FILT_OPTIONS) };
    if demangled.is_null() {
        return None;
    }
    // SAFETY: a non-null result is a NUL-terminated string from `malloc`, ours, freed only
    // below.
    let name = unsafe { CStr::from_ptr(demangled) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: that string, read and no longer borrowed, freed once.
    unsafe { libc::free(demangled.cast()) };
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::demangle;

    #[test]
    fn plain_names_are_unchanged() {
        for name in [
            "main",
            "qsort",
            "sort_and_sum.constprop.0",
            "_start",
            "_Zbogus",
            "_R",
            "",
        ] {
            assert_eq!(demangle(name), name);
        }
    }

    #[test]
    fn cpp_names_read_as_cplusplus_filt_prints_them() {
        let cases = [
            // namespaces, const methods, operators
            (
                "_ZNK5outer5inner6Widget3getEv",
                "outer::inner::Widget::get() const",
            ),
            (
                "_ZNK5outer5inner6WidgetplERKS1_",
                "outer::inner::Widget::operator+(outer::inner::Widget const&) const",
            ),
            (
                "_ZNK5outer5inner6WidgetltERKS1_",
                "outer::inner::Widget::operator<(outer::inner::Widget const&) const",
            ),
            // templates with a return type
            (
                "_ZNK5outer5inner6Widget2asIlEET_v",
                "long outer::inner::Widget::as<long>() const",
            ),
            (
                "_ZNSt6vectorIiSaIiEE2atEm",
                "std::vector<int, std::allocator<int> >::at(unsigned long)",
            ),
            ("_Znwm", "operator new(unsigned long)"),
            ("_ZdlPvm", "operator delete(void*, unsigned long)"),
            (
                "_ZSt24__throw_out_of_range_fmtPKcz",
                "std::__throw_out_of_range_fmt(char const*, ...)",
            ),
            // constructors, destructors
            ("_ZNSt8ios_base4InitC1Ev", "std::ios_base::Init::Init()"),
            ("_ZNSt8ios_base4InitD1Ev", "std::ios_base::Init::~Init()"),
            // GCC clones
            ("_Z3fooi.constprop.0", "foo(int) [clone .constprop.0]"),
            ("_Z3fooi.part.0", "foo(int) [clone .part.0]"),
            // symbol versions
            (
                "_ZSt17__throw_bad_allocv@GLIBCXX_3.4",
                "std::__throw_bad_alloc()@GLIBCXX_3.4",
            ),
            // expressions in template arguments: `enable_if` return types of libstdc++'s
            // templates, instantiated in the program (`std::vector` growth, `std::fill`)
            (
                "_ZSt14__relocate_a_1IllENSt9enable_ifIXsrSt24__is_bitwise_relocatableIT_vE5valueEPS2_E4typeES4_S4_S4_RSaIT0_E",
                "std::enable_if<std::__is_bitwise_relocatable<long, void>::value, long*>::type \
                 std::__relocate_a_1<long, long>(long*, long*, long*, std::allocator<long>&)",
            ),
            (
                "_ZSt9__fill_a1IPiiEN9__gnu_cxx11__enable_ifIXsrSt11__is_scalarIT0_E7__valueEvE6__typeET_S8_RKS4_",
                "__gnu_cxx::__enable_if<std::__is_scalar<int>::__value, void>::__type \
                 std::__fill_a1<int*, int>(int*, int*, int const&)",
            ),
            // an empty parameter pack
            (
                "_ZSt10_ConstructIiJEEvPT_DpOT0_",
                "void std::_Construct<int>(int*)",
            ),
            // a constructor template's parameter repeated by substitution
            ("_ZN1AC1IiEET_S1_", "A::A<int>(int, int)"),
            // a reference to a name nested in a substitution
            ("_ZN1A1fENS_1BERNS0_1CE", "A::f(A::B, A::B::C&)"),
            // standard substitutions in full, `decltype(nullptr)`
            (
                "_ZNSolsEDn",
                "std::basic_ostream<char, std::char_traits<char> >::operator<<(decltype(nullptr))",
            ),
        ];
        for (mangled, expected) in cases {
            assert_eq!(demangle(mangled), expected, "{mangled}");
        }
    }

    #[test]
    fn rust_legacy_names_lose_their_hash() {
        // From `rustc --crate-type=lib --emit=obj` and `nm`.
        let cases = [
            ("_ZN1r6shapes5total17hbd839ae3765e45ebE", "r::shapes::total"),
            (
                "_ZN1r6shapes6Circle4area17h814021bf758df6beE",
                "r::shapes::Circle::area",
            ),
            (
                "_ZN42_$LT$$RF$T$u20$as$u20$core..fmt..Debug$GT$3fmt17ha5f901933c1a336fE",
                "<&T as core::fmt::Debug>::fmt",
            ),
            (
                "_ZN1r6shapes5total17hbd839ae3765e45ebE.llvm.4711",
                "r::shapes::total",
            ),
            (
                "_ZN1r6shapes5total17hbd839ae3765e45ebE.constprop.0",
                "r::shapes::total.constprop.0",
            ),
        ];
        for (mangled, expected) in cases {
            assert_eq!(demangle(mangled), expected, "{mangled}");
        }
    }

    #[test]
    fn rust_v0_names_lose_their_disambiguators() {
        // From `rustc --crate-type=lib -C symbol-mangling-version=v0 --emit=obj` and `nm`.
        let cases = [
            (
                "_RINvNtCs2OpA4fNwd7R_1r6shapes5totalmEB4_",
                "r::shapes::total::<u32>",
            ),
            (
                "_RNvMNtCs2OpA4fNwd7R_1r6shapesNtB2_6Circle4area",
                "<r::shapes::Circle>::area",
            ),
            (
                "_RNvNtCs2OpA4fNwd7R_1r6shapes9use_total",
                "r::shapes::use_total",
            ),
            (
                "_RNvXs6_NtNtCsgEmfK2I1SDS_4core3fmt5floatdNtB7_5Debug3fmt",
                "<f64 as core::fmt::Debug>::fmt",
            ),
        ];
        for (mangled, expected) in cases {
            assert_eq!(demangle(mangled), expected, "{mangled}");
        }
    }
}
