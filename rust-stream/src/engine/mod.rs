//! The consumer engine and the seam under it.
//!
//! Today this holds [`transport`]: the requests, responses and errors that the in-process account
//! answers and that the aws-sdk transport will answer alike.

pub mod transport;
