//! The settler's releases: held messages given back to the queue by a visibility change, for the
//! dispatcher (a retry by visibility, a group given back), the heartbeat (orphans) and the stop. On
//! FIFO a release keeps each group's order and never makes a message visible while an earlier one
//! of its group may still be in flight.

use std::collections::HashMap;
use std::sync::Arc;

use super::Settler;
use crate::client::lease::Lease;
use crate::engine::held::Held;

impl Settler {
    /// Sets the visibility of held messages, in one call per 10; each message's own events are
    /// logged in its `process` span, if it had an attempt.
    pub(crate) async fn release(&self, held: Vec<Held>, seconds: i32) {
        let leases = held
            .iter()
            .map(|held| (held.lease.clone(), held.span.clone()))
            .collect();
        self.release_in_spans(leases, seconds).await;
    }

    /// Sets the visibility of messages in one call per 10; leases already settled are skipped.
    pub(crate) async fn release_leases(&self, leases: Vec<Arc<Lease>>, seconds: i32) {
        let leases = leases
            .into_iter()
            .map(|lease| (lease, tracing::Span::none()))
            .collect();
        self.release_in_spans(leases, seconds).await;
    }

    /// On FIFO each group's messages go in one call, in the group's order, and a group's messages
    /// behind one whose lease lapsed are let go without a call: a release must never make a
    /// message visible while an earlier one of its group may still be in flight. SQS would keep
    /// the group from receives meanwhile; LocalStack hands the released message out, out of order.
    async fn release_in_spans(&self, leases: Vec<(Arc<Lease>, tracing::Span)>, seconds: i32) {
        let mut claimed = Vec::new();
        for (lease, span) in leases {
            if self.leases.claim(&lease).await {
                claimed.push((lease, span));
            }
        }
        if claimed.is_empty() {
            return;
        }
        let answers = if self.fifo {
            let groups = in_group_order(std::mem::take(&mut claimed));
            let calls = groups.iter().map(|group| {
                let entries = group
                    .iter()
                    .map(|(lease, _)| (lease.clone(), seconds))
                    .collect();
                self.visibility_batcher.submit(entries)
            });
            let answers = futures_util::future::join_all(calls).await;
            claimed = groups.into_iter().flatten().collect();
            answers.into_iter().flatten().collect()
        } else {
            let entries = claimed
                .iter()
                .map(|(lease, _)| (lease.clone(), seconds))
                .collect();
            self.visibility_batcher.submit(entries).await
        };
        for ((lease, span), answer) in claimed.iter().zip(answers) {
            let _entered = span.enter();
            match answer {
                Ok(()) => {
                    tracing::debug!(messaging.message.id = %lease.message_id, visibility_s = seconds, "released")
                }
                // Its visibility had ended: it is visible already, or received again.
                Err(_) if lease.has_lapsed() => {
                    tracing::debug!(messaging.message.id = %lease.message_id, "not released: its visibility had ended")
                }
                // Not released: it comes back when its current visibility ends.
                Err(error) => {
                    tracing::warn!(messaging.message.id = %lease.message_id, error = %error, "release failed")
                }
            }
        }
    }
}

/// Claimed FIFO leases by group, each group in its order and cut before the first lease that
/// lapsed: that message may be in flight still, so neither it nor anything behind it is released
/// (their leases are claimed already: they are let go, and come back when their visibility
/// ends).
fn in_group_order(
    claimed: Vec<(Arc<Lease>, tracing::Span)>,
) -> Vec<Vec<(Arc<Lease>, tracing::Span)>> {
    let mut groups: Vec<Vec<(Arc<Lease>, tracing::Span)>> = Vec::new();
    let mut index: HashMap<Option<String>, usize> = HashMap::new();
    for (lease, span) in claimed {
        let at = *index.entry(lease.group_id.clone()).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[at].push((lease, span));
    }
    for group in &mut groups {
        group.sort_by_key(|(lease, _)| lease.received_order());
        if let Some(lapsed) = group.iter().position(|(lease, _)| lease.has_lapsed()) {
            for (lease, span) in group.drain(lapsed..) {
                let _entered = span.enter();
                tracing::debug!(
                    messaging.message.id = %lease.message_id,
                    "not released: its visibility, or an earlier one's of its group, had ended"
                );
            }
        }
    }
    groups.retain(|group| !group.is_empty());
    groups
}
