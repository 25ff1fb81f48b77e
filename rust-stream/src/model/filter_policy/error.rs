//! Why a filter policy was refused: one variant per rule of SNS's, each message naming the key.

/// Why a filter policy was refused. Each message names the key at fault (nested keys joined with
/// `.`) and says how to write it so that SNS accepts it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum FilterPolicyError {
    /// A `FilterPolicyScope` name SNS does not know.
    #[error(
        "unknown filter policy scope `{0}`: use `MessageAttributes` (the default) or `MessageBody`"
    )]
    UnknownScope(String),
    /// The policy text is larger than [`MAX_POLICY_SIZE`](super::MAX_POLICY_SIZE).
    #[error(
        "the filter policy is {size} bytes, more than SNS's {max} bytes: match fewer values, or \
         split the subscription in two"
    )]
    TooLarge {
        /// The policy's size in bytes.
        size: usize,
        /// [`MAX_POLICY_SIZE`](super::MAX_POLICY_SIZE).
        max: usize,
    },
    /// The policy text is not JSON.
    #[error("the filter policy is not valid JSON ({0}): write it as a JSON object")]
    NotJson(String),
    /// The policy is JSON but not an object.
    #[error(
        "the filter policy must be a JSON object of keys to arrays of values, such as \
         {{\"kind\": [\"order\"]}}; it is {found}"
    )]
    NotAnObject {
        /// What the JSON was instead (`an array`, `a string`...).
        found: &'static str,
    },
    /// A key's value is neither an array of values nor, in the body scope, a nested object.
    #[error(
        "filter policy key `{key}` must be given an array of values, such as [\"a\", \"b\"]\
         {nested_hint}; it is {found}"
    )]
    NotAnArray {
        /// The key.
        key: String,
        /// `, or an object of nested keys` in the body scope.
        nested_hint: &'static str,
        /// What it was instead.
        found: &'static str,
    },
    /// A nested object in a `MessageAttributes` policy.
    #[error(
        "filter policy key `{key}` holds nested keys, which the MessageAttributes scope does not \
         accept: give it an array of values, or set the scope to MessageBody to match a JSON body"
    )]
    NestedInAttributeScope {
        /// The key.
        key: String,
    },
    /// A key given an empty array.
    #[error("filter policy key `{key}` has an empty array: give it at least one value")]
    EmptyArray {
        /// The key.
        key: String,
    },
    /// An array element that is neither a plain value nor an operator object.
    #[error(
        "filter policy key `{key}` has {found} among its values: a value must be a string, a \
         number, true, false, null, or an object with one operator such as {{\"prefix\": \"a\"}}"
    )]
    InvalidValue {
        /// The key.
        key: String,
        /// What was found (`an array`...).
        found: &'static str,
    },
    /// An operator object without exactly one key.
    #[error(
        "filter policy key `{key}` has an operator object with {count} keys: write one operator \
         per object, e.g. [{{\"prefix\": \"a\"}}, {{\"suffix\": \"z\"}}] for either"
    )]
    OperatorCount {
        /// The key.
        key: String,
        /// How many keys the object had.
        count: usize,
    },
    /// An operator SNS does not have.
    #[error(
        "filter policy key `{key}` uses unknown operator `{operator}`: SNS has prefix, suffix, \
         equals-ignore-case, anything-but, numeric, exists and cidr"
    )]
    UnknownOperator {
        /// The key.
        key: String,
        /// The operator as written.
        operator: String,
    },
    /// An operator given a value of the wrong kind.
    #[error("filter policy key `{key}`: `{operator}` takes {expected}")]
    OperatorValue {
        /// The key.
        key: String,
        /// The operator.
        operator: &'static str,
        /// What the operator takes, with an example.
        expected: &'static str,
    },
    /// An `anything-but` object with a pattern SNS does not allow inside it.
    #[error(
        "filter policy key `{key}`: `anything-but` accepts a value, an array of values or \
         {{\"prefix\": \"...\"}}, not `{pattern}`"
    )]
    AnythingButPattern {
        /// The key.
        key: String,
        /// The pattern as written.
        pattern: String,
    },
    /// A malformed `numeric` expression.
    #[error(
        "filter policy key `{key}`: bad numeric expression ({reason}); write [\"=\", 5], \
         [\"<\", 5], [\">=\", 0] or a range such as [\">\", 0, \"<=\", 100]"
    )]
    Numeric {
        /// The key.
        key: String,
        /// What was wrong.
        reason: String,
    },
    /// A number outside ±[`MAX_NUMBER`](super::MAX_NUMBER).
    #[error(
        "filter policy key `{key}` has number {value}, outside the -1000000000 to 1000000000 SNS \
         can match: use a number in that range"
    )]
    NumberOutOfRange {
        /// The key.
        key: String,
        /// The number.
        value: f64,
    },
    /// A malformed `cidr` value.
    #[error(
        "filter policy key `{key}`: `{value}` is not an IP network ({reason}); write it as \
         address/bits, e.g. \"10.0.0.0/24\" or \"2001:db8::/32\""
    )]
    Cidr {
        /// The key.
        key: String,
        /// The value as written.
        value: String,
        /// What was wrong.
        reason: &'static str,
    },
    /// More than [`MAX_KEYS`](super::MAX_KEYS) keys.
    #[error(
        "the filter policy has {count} keys ({keys}), more than SNS's {max}: match on fewer \
         keys, or split the policy across subscriptions"
    )]
    TooManyKeys {
        /// How many keys one alternative of the policy has.
        count: usize,
        /// Those keys, comma-separated.
        keys: String,
        /// [`MAX_KEYS`](super::MAX_KEYS).
        max: usize,
    },
    /// More than [`MAX_COMBINATIONS`](super::MAX_COMBINATIONS) combinations.
    #[error(
        "the filter policy has {combinations} combinations of values, more than SNS's {max} \
         (the product of each key's number of values, times its nesting depth in the body scope, \
         summed over \"$or\" alternatives): list fewer values, or use prefix or numeric ranges"
    )]
    TooComplex {
        /// The policy's combinations (saturating).
        combinations: u64,
        /// [`MAX_COMBINATIONS`](super::MAX_COMBINATIONS).
        max: u64,
    },
}
