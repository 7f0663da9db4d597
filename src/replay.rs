//! Events → finished calls: one call stack per thread.
