//! The `utrace.data` file: format, writer and reader.
