//! ELF symbols, PLT stubs, file offsets and demangled names of the traced files.

mod demangle;

pub use demangle::demangle;
