//! Amazon SQS: its rules and limits, shared by every backend.

pub mod rules;
