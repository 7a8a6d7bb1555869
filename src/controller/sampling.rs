//! Rate-limiting of the watch streams that map to every config.

use std::time::Duration;

use futures::{Stream, StreamExt};

/// Lets through at most one item per `period` (the latest), while still draining `stream` so its cache stays
/// current. Claims in a busy cluster change every few milliseconds; mapped to every config one by one, each change
/// would push every config's debounced reconcile further out, and a config with nothing else to trigger it would
/// never be reconciled.
pub(super) fn sampled<S>(stream: S, period: Duration) -> impl Stream<Item = S::Item> + Send
where
    S: Stream + Send + Unpin + 'static,
    S::Item: Send,
{
    futures::stream::unfold((stream, false), move |(mut stream, ended)| async move {
        if ended {
            return None;
        }
        let mut latest = stream.next().await?;
        let window = tokio::time::sleep(period);
        tokio::pin!(window);
        loop {
            tokio::select! {
                _ = &mut window => return Some((latest, (stream, false))),
                next = stream.next() => match next {
                    Some(item) => latest = item,
                    None => return Some((latest, (stream, true))),
                },
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_burst_passes_as_its_latest_item_and_the_end_flushes() {
        let (sender, receiver) = futures::channel::mpsc::unbounded::<u32>();
        let mut out = Box::pin(sampled(receiver, Duration::from_millis(50)));
        for i in 0..100 {
            sender.unbounded_send(i).unwrap();
        }
        assert_eq!(out.next().await, Some(99), "one item for the whole burst, the latest");
        sender.unbounded_send(100).unwrap();
        sender.unbounded_send(101).unwrap();
        drop(sender);
        assert_eq!(out.next().await, Some(101));
        assert_eq!(out.next().await, None);
    }

    #[tokio::test]
    async fn items_further_apart_than_the_period_all_pass() {
        let (sender, receiver) = futures::channel::mpsc::unbounded::<u32>();
        let mut out = Box::pin(sampled(receiver, Duration::from_millis(50)));
        sender.unbounded_send(1).unwrap();
        assert_eq!(out.next().await, Some(1));
        tokio::time::sleep(Duration::from_millis(200)).await;
        sender.unbounded_send(2).unwrap();
        assert_eq!(out.next().await, Some(2));
    }
}
