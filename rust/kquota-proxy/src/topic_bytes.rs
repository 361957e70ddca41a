//! A frame's bytes per topic, as the topic quotas take them: a Produce request's (each name read
//! from the request) and a Fetch response's (names shared with `topic_names`' map, since Fetch
//! v13+ names its topics by id). One borrowing of either for the kernel's response step.

use std::sync::Arc;

/// A Produce request's topics with their bytes (`produce_topics`).
pub type ProduceTopicBytes = Vec<(Box<str>, f64)>;

/// A Fetch response's topics with their bytes (`fetch_topics`).
pub type FetchTopicBytes = Vec<(Arc<str>, f64)>;

/// `(topic, bytes)` borrowed for the kernel's response step.
pub fn topic_refs<S: AsRef<str>>(topics: &[(S, f64)]) -> Vec<(&str, f64)> {
    topics.iter().map(|(t, b)| (t.as_ref(), *b)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn either_kind_borrows_the_same_pairs() {
        let produce: ProduceTopicBytes = vec![("a".into(), 1.0), ("b".into(), 2.5)];
        let fetch: FetchTopicBytes = vec![(Arc::from("a"), 1.0), (Arc::from("b"), 2.5)];
        assert_eq!(topic_refs(&produce), vec![("a", 1.0), ("b", 2.5)]);
        assert_eq!(topic_refs(&produce), topic_refs(&fetch));
    }
}
