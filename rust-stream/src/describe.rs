//! How a message type is described: [`Payload`] (its Rust type, and with the `schemars` feature
//! its JSON Schema), and the short names the AsyncAPI document and the metrics use for types.

/// How a message type is described in the document: its Rust type, and with the `schemars`
/// feature its JSON Schema.
///
/// ```
/// use rust_stream::describe::Payload;
///
/// struct Order;
/// assert!(Payload::named::<Order>().type_name().ends_with("Order"));
/// ```
#[derive(Clone, Copy)]
pub struct Payload {
    pub(crate) type_name: &'static str,
    #[cfg(feature = "schemars")]
    pub(crate) schema: Option<fn(&mut schemars::SchemaGenerator) -> schemars::Schema>,
}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut debug = f.debug_struct("Payload");
        debug.field("type_name", &self.type_name);
        #[cfg(feature = "schemars")]
        debug.field("schema", &self.schema.is_some());
        debug.finish()
    }
}

impl Payload {
    /// `T`, described by its name only.
    pub fn named<T: ?Sized>() -> Self {
        Self {
            type_name: std::any::type_name::<T>(),
            #[cfg(feature = "schemars")]
            schema: None,
        }
    }

    /// `T`, described by its JSON Schema.
    #[cfg(feature = "schemars")]
    #[cfg_attr(docsrs, doc(cfg(feature = "schemars")))]
    pub fn schema<T: schemars::JsonSchema + ?Sized>() -> Self {
        fn subschema<T: schemars::JsonSchema + ?Sized>(
            generator: &mut schemars::SchemaGenerator,
        ) -> schemars::Schema {
            generator.subschema_for::<T>()
        }
        Self {
            type_name: std::any::type_name::<T>(),
            schema: Some(subschema::<T>),
        }
    }

    /// The Rust type described.
    pub fn type_name(&self) -> &'static str {
        self.type_name
    }

    /// Panics unless this describes `T`: a payload given by hand must describe the values sent.
    pub(crate) fn check_describes<T: ?Sized>(&self) {
        let expected = std::any::type_name::<T>();
        assert!(
            self.type_name == expected,
            "the payload given describes `{}`, but the messages are `{expected}`",
            self.type_name
        );
    }
}

/// A name fit for an AsyncAPI key (`^[\w\d.\-_]+$`): the last path segment of a Rust type,
/// outside its generic arguments, with any other character replaced by `_`.
pub(crate) fn short_name(type_name: &str) -> String {
    let outer = type_name.split('<').next().unwrap_or(type_name);
    let last = outer.rsplit("::").next().unwrap_or(outer);
    let name: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() {
        "message".to_owned()
    } else {
        name
    }
}
