//! Reports: each consumes the finished calls of the replayer.
