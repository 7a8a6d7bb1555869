use super::*;

#[tokio::test]
async fn a_burst_passes_as_its_first_and_its_latest_item_and_the_end_flushes() {
    let (sender, receiver) = futures::channel::mpsc::unbounded::<u32>();
    let mut out = Box::pin(sampled(receiver, Duration::from_millis(50)));
    for i in 0..100 {
        sender.unbounded_send(i).unwrap();
    }
    assert_eq!(out.next().await, Some(0), "the first item passes at once");
    assert_eq!(out.next().await, Some(99), "then one item for the rest of the burst, the latest");
    sender.unbounded_send(100).unwrap();
    sender.unbounded_send(101).unwrap();
    drop(sender);
    assert_eq!(out.next().await, Some(101));
    assert_eq!(out.next().await, None);
}

#[tokio::test]
async fn items_further_apart_than_the_period_all_pass_without_delay() {
    let (sender, receiver) = futures::channel::mpsc::unbounded::<u32>();
    let mut out = Box::pin(sampled(receiver, Duration::from_millis(200)));
    sender.unbounded_send(1).unwrap();
    assert_eq!(out.next().await, Some(1));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent = std::time::Instant::now();
    sender.unbounded_send(2).unwrap();
    assert_eq!(out.next().await, Some(2));
    assert!(sent.elapsed() < Duration::from_millis(150), "a lone item after a quiet period is not held back");
}

#[tokio::test]
async fn under_constant_churn_items_pass_once_per_period() {
    let (sender, receiver) = futures::channel::mpsc::unbounded::<u32>();
    let out = sampled(receiver, Duration::from_millis(100));
    let started = std::time::Instant::now();
    let feeder = tokio::spawn(async move {
        for i in 0..100 {
            sender.unbounded_send(i).unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let passed: Vec<u32> = out.collect().await;
    feeder.await.unwrap();
    // The feed takes about 0.5 s, longer on a loaded machine: one item per started period, and the last.
    let periods = started.elapsed().as_millis() as usize / 100;
    assert!((3..=periods + 2).contains(&passed.len()), "about one per 100 ms over {periods} periods: {passed:?}");
    assert_eq!(passed.last(), Some(&99), "the latest item is never lost");
}
