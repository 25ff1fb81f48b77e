//! Which SQS the environment names, for [`SqsBroker::from_env_or_in_process`]: the rule on its
//! own, over any way of reading variables, so it is tested without touching the process
//! environment (which tests running in parallel threads share).
//!
//! [`SqsBroker::from_env_or_in_process`]: crate::SqsBroker::from_env_or_in_process

/// Variables naming an endpoint, in the order the SDK prefers them: a local stand-in such as
/// LocalStack, or a VPC endpoint of Amazon SQS.
const ENDPOINT_VARIABLES: [&str; 2] = ["AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL"];

/// Variables that say a service is meant to run on Amazon SQS: the region it is in, or who it
/// calls as. A profile or access key alone still needs a region, which connecting then asks for.
const AWS_VARIABLES: [&str; 4] = [
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
    "AWS_ACCESS_KEY_ID",
];

/// The backend the environment names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Choice {
    /// SQS at the endpoint `variable` names.
    Endpoint { variable: &'static str, url: String },
    /// Amazon SQS, because `variable` is set.
    Aws { variable: &'static str },
    /// No variable names SQS: the in-process account.
    InProcess,
}

/// The backend the variables `read` answers name. An empty variable counts as unset: `AWS_REGION=
/// cargo run` is how a shell drops one for a single command.
pub(crate) fn choose(read: impl Fn(&str) -> Option<String>) -> Choice {
    let set = |variable: &&str| read(variable).filter(|value| !value.trim().is_empty());
    if let Some((variable, url)) = ENDPOINT_VARIABLES
        .iter()
        .find_map(|variable| Some((*variable, set(variable)?)))
    {
        return Choice::Endpoint { variable, url };
    }
    match AWS_VARIABLES
        .iter()
        .find(|variable| set(variable).is_some())
    {
        Some(variable) => Choice::Aws { variable },
        None => Choice::InProcess,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choose_from(pairs: &[(&str, &str)]) -> Choice {
        choose(|name| {
            pairs
                .iter()
                .find(|(variable, _)| *variable == name)
                .map(|(_, value)| (*value).to_owned())
        })
    }

    #[test]
    fn nothing_set_chooses_the_in_process_account() {
        assert_eq!(choose_from(&[]), Choice::InProcess);
    }

    #[test]
    fn a_region_alone_chooses_amazon_sqs() {
        assert_eq!(
            choose_from(&[("AWS_REGION", "eu-west-1")]),
            Choice::Aws {
                variable: "AWS_REGION"
            }
        );
        assert_eq!(
            choose_from(&[("AWS_DEFAULT_REGION", "eu-west-1")]),
            Choice::Aws {
                variable: "AWS_DEFAULT_REGION"
            }
        );
    }

    #[test]
    fn a_profile_or_an_access_key_chooses_amazon_sqs() {
        assert_eq!(
            choose_from(&[("AWS_PROFILE", "work")]),
            Choice::Aws {
                variable: "AWS_PROFILE"
            }
        );
        assert_eq!(
            choose_from(&[("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")]),
            Choice::Aws {
                variable: "AWS_ACCESS_KEY_ID"
            }
        );
    }

    #[test]
    fn an_endpoint_chooses_sqs_there_even_with_a_region() {
        assert_eq!(
            choose_from(&[
                ("AWS_REGION", "us-east-1"),
                ("AWS_ENDPOINT_URL", "http://127.0.0.1:4566"),
            ]),
            Choice::Endpoint {
                variable: "AWS_ENDPOINT_URL",
                url: "http://127.0.0.1:4566".to_owned()
            }
        );
    }

    #[test]
    fn the_sqs_endpoint_wins_over_the_general_one_as_in_the_sdk() {
        assert_eq!(
            choose_from(&[
                ("AWS_ENDPOINT_URL", "http://127.0.0.1:4566"),
                ("AWS_ENDPOINT_URL_SQS", "http://127.0.0.1:9324"),
            ]),
            Choice::Endpoint {
                variable: "AWS_ENDPOINT_URL_SQS",
                url: "http://127.0.0.1:9324".to_owned()
            }
        );
    }

    #[test]
    fn empty_variables_count_as_unset() {
        assert_eq!(
            choose_from(&[("AWS_ENDPOINT_URL", ""), ("AWS_REGION", " ")]),
            Choice::InProcess
        );
    }
}
