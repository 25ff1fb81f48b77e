//! What the commands print: tables of queues, messages and a redrive's report, a message in
//! detail, JSON, audit lines, and a redrive's progress on standard error.

use std::time::Duration;

use rust_stream::operations::{AuditRecord, Message, QueueInfo, RedriveReport};
use rust_stream::retry::REDRIVE_MARGIN;
use serde::Serialize;

/// A redrive's progress on standard error: a count rewritten in place on a terminal, else a log
/// line every 10 messages (and at least every 5 s while moving), so that a run whose output is
/// piped or collected, or that is stopped, has said how far it got.
pub(crate) struct Progress {
    terminal: bool,
    moved: usize,
    last_line: std::time::Instant,
}

impl Progress {
    pub(crate) fn new() -> Self {
        Self {
            terminal: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            moved: 0,
            last_line: std::time::Instant::now(),
        }
    }

    pub(crate) fn moved(&mut self, record: &AuditRecord) {
        self.moved += 1;
        let verb = if record.dry_run {
            "would move"
        } else {
            "moved"
        };
        if self.terminal {
            if self.moved.is_multiple_of(10) {
                eprint!("\r{verb} {} from {}", self.moved, record.from);
            }
        } else if self.moved.is_multiple_of(10)
            || self.last_line.elapsed() >= Duration::from_secs(5)
        {
            self.last_line = std::time::Instant::now();
            eprintln!("redrive: {verb} {} from {} so far", self.moved, record.from);
        }
    }

    pub(crate) fn end(&self) {
        if self.terminal && self.moved >= 10 {
            eprintln!();
        }
    }
}

/// One deleted (or, in a dry run, chosen) message, for the audit trail.
pub(crate) fn audit_line(record: &AuditRecord) -> String {
    format!(
        "{} {} from {} (group {}, original {}, reason: {})",
        if record.dry_run {
            "would delete"
        } else {
            "deleted"
        },
        record.message_id,
        record.from,
        record.group_id.as_deref().unwrap_or("-"),
        record.original_message_id.as_deref().unwrap_or("-"),
        record.reason.as_deref().unwrap_or("-"),
    )
}

pub(crate) fn to_json(value: &impl Serialize) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_else(|error| {
        // The types printed are plain data; this cannot fail, but says so if it does.
        format!("{{\"error\":\"cannot write JSON: {error}\"}}")
    });
    text.push('\n');
    text
}

/// A table: a header row and rows, columns padded to their widest cell.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (index, (cell, width)) in cells.iter().zip(&widths).enumerate() {
            if index + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<width$}  "));
            }
        }
        out.trim_end().to_owned() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

pub(crate) fn queues_table(queues: &[QueueInfo]) -> String {
    if queues.is_empty() {
        return "no queues\n".to_owned();
    }
    let rows: Vec<Vec<String>> = queues
        .iter()
        .map(|queue| {
            vec![
                queue.name.clone(),
                if queue.fifo { "fifo" } else { "standard" }.to_owned(),
                queue.visible.to_string(),
                queue.in_flight.to_string(),
                queue.delayed.to_string(),
                queue.dead_letter.as_ref().map_or_else(
                    || "-".to_owned(),
                    |target| format!("{} ({})", target.queue, receives(target.max_receive_count)),
                ),
                if queue.dead_letter_sources.is_empty() {
                    "-".to_owned()
                } else {
                    queue.dead_letter_sources.join(",")
                },
            ]
        })
        .collect();
    table(
        &[
            "QUEUE",
            "TYPE",
            "VISIBLE",
            "IN_FLIGHT",
            "DELAYED",
            "DEAD_LETTER",
            "DEAD_LETTER_FOR",
        ],
        &rows,
    )
}

/// A dead-letter queue's `maxReceiveCount` as an operator reads it: a queue the library creates
/// for `n` attempts gets `n` + [`REDRIVE_MARGIN`] receives, so a count above the margin shows
/// the attempts it most likely stands for.
pub(crate) fn receives(max_receive_count: u32) -> String {
    if max_receive_count > REDRIVE_MARGIN {
        format!(
            "after {max_receive_count} receives: {} attempts +{REDRIVE_MARGIN} margin",
            max_receive_count - REDRIVE_MARGIN
        )
    } else {
        format!("after {max_receive_count} receives")
    }
}

/// A body cut to one short line for a table.
pub(crate) fn short(body: &str) -> String {
    short_to(body, 60)
}

/// `text` cut to one line of at most `width` characters.
pub(crate) fn short_to(text: &str, width: usize) -> String {
    let line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(width)
        .collect();
    if text.chars().count() > width {
        format!("{line}…")
    } else {
        line
    }
}

pub(crate) fn messages_table(messages: &[Message]) -> String {
    if messages.is_empty() {
        return "no messages\n".to_owned();
    }
    let rows: Vec<Vec<String>> = messages
        .iter()
        .map(|message| {
            let dead = message.dead_letter.as_ref();
            vec![
                message.message_id.clone(),
                message.state.to_owned(),
                message
                    .receive_count
                    .map_or_else(|| "-".to_owned(), |n| n.to_string()),
                message.group_id.clone().unwrap_or_else(|| "-".to_owned()),
                dead.and_then(|d| d.source_queue.clone().or(d.moved_by_sqs_from.clone()))
                    .unwrap_or_else(|| "-".to_owned()),
                dead.and_then(|d| d.reason.as_deref())
                    .map_or_else(|| "-".to_owned(), |reason| short_to(reason, 40)),
                short(&message.body),
            ]
        })
        .collect();
    table(
        &[
            "MESSAGE_ID",
            "STATE",
            "RECEIVES",
            "GROUP",
            "SOURCE",
            "REASON",
            "BODY",
        ],
        &rows,
    )
}

pub(crate) fn message_detail(message: &Message) -> String {
    let mut out = format!("message {}\n", message.message_id);
    out.push_str(&format!("  state: {}\n", message.state));
    let optional = [
        ("group", message.group_id.clone()),
        ("dedup id", message.dedup_id.clone()),
        ("sequence", message.sequence_number.clone()),
        ("receives", message.receive_count.map(|n| n.to_string())),
    ];
    for (label, value) in optional {
        if let Some(value) = value {
            out.push_str(&format!("  {label}: {value}\n"));
        }
    }
    if let Some(dead) = &message.dead_letter {
        out.push_str("  dead letter:\n");
        let lines = [
            ("source queue", dead.source_queue.clone()),
            ("original id", dead.original_message_id.clone()),
            ("attempts", dead.attempts.map(|n| n.to_string())),
            ("reason", dead.reason.clone()),
            ("moved by SQS from", dead.moved_by_sqs_from.clone()),
        ];
        for (label, value) in lines {
            if let Some(value) = value {
                out.push_str(&format!("    {label}: {value}\n"));
            }
        }
    }
    out.push_str("  attributes:\n");
    for (name, value) in &message.attributes {
        out.push_str(&format!("    {name}: {value}\n"));
    }
    if !message.message_attributes.is_empty() {
        out.push_str("  message attributes:\n");
        for (name, value) in &message.message_attributes {
            out.push_str(&format!(
                "    {name} ({}): {}\n",
                value.data_type, value.value
            ));
        }
    }
    out.push_str(&format!("  body: {}\n", message.body));
    out
}

pub(crate) fn redrive_table(report: &RedriveReport) -> String {
    let rows: Vec<Vec<String>> = report
        .moved
        .iter()
        .map(|record: &AuditRecord| {
            vec![
                record.message_id.clone(),
                record.to.clone(),
                record.group_id.clone().unwrap_or_else(|| "-".to_owned()),
                record
                    .new_message_id
                    .clone()
                    .unwrap_or_else(|| "-".to_owned()),
                record.reason.clone().unwrap_or_else(|| "-".to_owned()),
            ]
        })
        .collect();
    let mut out = String::new();
    if !rows.is_empty() {
        out.push_str(&table(
            &["MESSAGE_ID", "TO", "GROUP", "NEW_MESSAGE_ID", "REASON"],
            &rows,
        ));
    }
    for left in &report.left {
        out.push_str(&format!("left {}: {}\n", left.message_id, left.reason));
    }
    for back in &report.came_back {
        out.push_str(&format!(
            "came back {} (sent as {}): {}; left for the next run\n",
            back.message_id,
            back.sent_as,
            back.reason.as_deref().unwrap_or("dead-lettered again")
        ));
    }
    out.push_str(&format!("{report}\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::receives;

    #[test]
    fn a_receive_count_above_the_margin_shows_the_attempts_it_stands_for() {
        assert_eq!(receives(15), "after 15 receives: 5 attempts +10 margin");
        assert_eq!(receives(3), "after 3 receives");
    }
}
