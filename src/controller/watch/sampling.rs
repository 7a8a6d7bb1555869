//! Rate-limiting of the watch streams that map to every config.

use std::time::Duration;

use futures::{Stream, StreamExt};

/// Lets through at most one item per `period`: an item after a quiet period passes at once, and the items that
/// arrive within `period` of it pass as their latest when the period ends; `stream` is drained all along so its
/// cache stays current. Claims in a busy cluster change every few milliseconds; mapped to every config one by one,
/// each change would push every config's debounced reconcile further out, and a config with nothing else to
/// trigger it would never be reconciled. A lone change (a device taint) is not delayed.
pub fn sampled<S>(stream: S, period: Duration) -> impl Stream<Item = S::Item> + Send
where
    S: Stream + Send + Unpin + 'static,
    S::Item: Send,
{
    // State: the stream, whether it ended, and when the last item passed.
    futures::stream::unfold((stream, false, None), move |(mut stream, ended, passed)| async move {
        if ended {
            return None;
        }
        let now = tokio::time::Instant::now();
        let cooled = passed.is_none_or(|at| now >= at + period);
        if cooled {
            let first = stream.next().await?;
            return Some((first, (stream, false, Some(tokio::time::Instant::now()))));
        }
        let window = tokio::time::sleep_until(passed.expect("cooling") + period);
        tokio::pin!(window);
        let mut latest = None;
        loop {
            tokio::select! {
                _ = &mut window => {
                    let item = match latest {
                        Some(item) => item,
                        // Nothing within the period: the next item passes at once.
                        None => stream.next().await?,
                    };
                    return Some((item, (stream, false, Some(tokio::time::Instant::now()))));
                }
                next = stream.next() => match next {
                    Some(item) => latest = Some(item),
                    None => return latest.map(|item| (item, (stream, true, None))),
                },
            }
        }
    })
}

#[cfg(test)]
mod tests;
