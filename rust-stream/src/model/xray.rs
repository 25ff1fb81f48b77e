//! X-Ray's trace header (`AWSTraceHeader`, Lambda's `_X_AMZN_TRACE_ID`) and the W3C
//! `traceparent` of the same ids, by X-Ray's documented mapping: `Root=1-{8 hex}-{24 hex}` is the
//! 32-hex trace id (the first 8 digits are the epoch seconds X-Ray writes there), `Parent` the
//! span id, `Sampled=1` the sampled flag.

/// The name of the SQS message system attribute that carries an X-Ray trace header.
pub const AWS_TRACE_HEADER: &str = "AWSTraceHeader";

/// The W3C `traceparent` of an X-Ray trace header (`AWSTraceHeader`, or Lambda's
/// `_X_AMZN_TRACE_ID`), by X-Ray's documented mapping: the trace id is the `Root`'s two hex parts
/// joined (`1-5759e988-bd862e3fe1be46a994272793` is `5759e988bd862e3fe1be46a994272793`), the
/// span id is `Parent`, and the trace is sampled when `Sampled=1`.
///
/// `None` when the header has no well-formed `Root` or no `Parent` (a span to continue needs both).
///
/// ```
/// use rust_stream::propagation::traceparent_from_xray;
///
/// assert_eq!(
///     traceparent_from_xray("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1")
///         .as_deref(),
///     Some("00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01")
/// );
/// ```
pub fn traceparent_from_xray(header: &str) -> Option<String> {
    let mut root = None;
    let mut parent = None;
    let mut sampled = false;
    for field in header.split(';') {
        let Some((key, value)) = field.split_once('=') else {
            continue;
        };
        match key.trim() {
            "Root" => root = Some(xray_root(value.trim())?),
            "Parent" => parent = Some(value.trim()).filter(|id| is_hex(id, 16)),
            "Sampled" => sampled = value.trim() == "1",
            _ => {}
        }
    }
    let (epoch, unique) = root?;
    let parent = parent?.to_ascii_lowercase();
    let trace_id = format!("{epoch}{unique}").to_ascii_lowercase();
    let zero = |id: &str| id.bytes().all(|digit| digit == b'0');
    if zero(&trace_id) || zero(&parent) {
        return None;
    }
    Some(format!(
        "00-{trace_id}-{parent}-{}",
        if sampled { "01" } else { "00" }
    ))
}

/// The X-Ray trace header of a W3C `traceparent`: the inverse of [`traceparent_from_xray`].
/// `None` when `traceparent` is not a version-00 one.
pub fn xray_from_traceparent(traceparent: &str) -> Option<String> {
    let mut parts = traceparent.split('-');
    let (Some("00"), Some(trace_id), Some(span_id), Some(flags), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    if !is_hex(trace_id, 32) || !is_hex(span_id, 16) || !is_hex(flags, 2) {
        return None;
    }
    let sampled = u8::from_str_radix(flags, 16).ok()? & 1;
    Some(format!(
        "Root=1-{}-{};Parent={span_id};Sampled={sampled}",
        &trace_id[..8],
        &trace_id[8..]
    ))
}

/// The epoch and unique parts of an X-Ray `Root` (`1-{8 hex}-{24 hex}`).
fn xray_root(root: &str) -> Option<(&str, &str)> {
    let rest = root.strip_prefix("1-")?;
    let (epoch, unique) = rest.split_once('-')?;
    (is_hex(epoch, 8) && is_hex(unique, 24)).then_some((epoch, unique))
}

/// Whether `text` is `digits` hex digits.
fn is_hex(text: &str, digits: usize) -> bool {
    text.len() == digits && text.bytes().all(|byte| byte.is_ascii_hexdigit())
}

/// Whether `header` is an X-Ray trace header SQS takes as `AWSTraceHeader`: one with a
/// well-formed `Root`.
pub(crate) fn is_xray_header(header: &str) -> bool {
    header.split(';').any(|field| {
        field
            .split_once('=')
            .is_some_and(|(key, value)| key.trim() == "Root" && xray_root(value.trim()).is_some())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const XRAY: &str = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
    const W3C: &str = "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01";

    #[test]
    fn an_xray_header_is_the_w3c_traceparent_of_the_same_ids_and_back() {
        assert_eq!(traceparent_from_xray(XRAY).as_deref(), Some(W3C));
        assert_eq!(xray_from_traceparent(W3C).as_deref(), Some(XRAY));
        // Fields in any order, with Lambda's `Lineage` and spaces; unsampled.
        assert_eq!(
            traceparent_from_xray(
                "Sampled=0; Lineage=a87bd80c:1|68fd508a:5; Parent=53995C3F42CD8AD8;Root=1-5759e988-bd862e3fe1be46a994272793"
            )
            .as_deref(),
            Some("00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-00")
        );
        assert_eq!(
            xray_from_traceparent("00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-00")
                .as_deref(),
            Some("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0")
        );
    }

    #[test]
    fn a_header_without_a_well_formed_root_or_a_parent_continues_nothing() {
        for header in [
            "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1",
            "Root=1-5759e98-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8",
            "Root=2-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8",
            "Root=1-5759e988-bd862e3fe1be46a99427279z;Parent=53995c3f42cd8ad8",
            "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad",
            "Root=1-00000000-000000000000000000000000;Parent=53995c3f42cd8ad8",
            "",
        ] {
            assert_eq!(traceparent_from_xray(header), None, "{header}");
        }
        assert!(is_xray_header(
            "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1"
        ));
        assert!(!is_xray_header(
            "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01"
        ));
        assert_eq!(
            xray_from_traceparent("01-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01"),
            None
        );
    }
}
