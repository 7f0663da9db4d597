//! ELF symbols, PLT stubs, file offsets and demangled names of the traced files.
