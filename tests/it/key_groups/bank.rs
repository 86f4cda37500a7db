//! The bank: 32 clients move money between random groups of accounts through one-shot
//! key groups while an auditor reads all of them through a group; the total never
//! changes.

use super::*;
use tokio::task::JoinHandle;

const ACCOUNTS: u64 = 48;
const CLIENTS: u64 = 32;
const TRANSFERS: u64 = 2;
/// A bound for a broken run only (a client or call that never ends), far above what
/// a run takes on a slow, busy machine (seconds here, minutes on a loaded CI machine):
/// past it the test fails saying how far it got, instead of hanging.
const BROKEN_RUN: Duration = Duration::from_mins(30);

/// Whether a client of this test tries again after `e`: a refusal or contention when
/// groups race for keys ([`contended`]), or a call that failed on a busy machine (a
/// timeout: `Error::Backend`, or `Error::GroupLost` when the lease passed before the
/// commit). A one-shot transaction commits whole or not at all, so the total holds
/// either way, and a group a failed call left owns its members only until its lease
/// passes.
fn retried(e: &Error) -> bool {
    contended(e) || matches!(e, Error::Backend { .. } | Error::GroupLost { .. })
}

/// The total of [`audit`], tried again (after [`backoff`]) until it gets its group.
async fn audit_when_free<S: DocumentStore>(
    db: &Mapper<S>,
    rng: &mut rand::rngs::StdRng,
    in_a_row: &mut u32,
) -> i64 {
    loop {
        match audit(db, ACCOUNTS).await {
            Ok(total) => return total,
            Err(e) if retried(&e) => tokio::time::sleep(backoff(rng, in_a_row)).await,
            Err(e) => panic!("auditor: {e}"),
        }
    }
}

/// Joins the clients in `clients` that have ended, adding up what they answer; a
/// client's panic is the test's.
async fn join_ended(clients: &mut Vec<JoinHandle<(u64, u64)>>) -> (u64, u64) {
    let (ended, running) = std::mem::take(clients)
        .into_iter()
        .partition(JoinHandle::is_finished);
    *clients = running;
    let mut sum = (0, 0);
    for client in ended {
        let (refused, failed) = client
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        sum = (sum.0 + refused, sum.1 + failed);
    }
    sum
}

/// 32 clients move amounts between random groups of 2 to 20 of 48 accounts, while an
/// auditor reads all of them through a group: no snapshot shows another total or a
/// negative balance, and the total is unchanged at the end.
async fn transfers_keep_the_total(backend: &Backend, label: &str) {
    let db = Mapper::new(backend.store("keygroup_bank").await);
    open_accounts(&db, 1..=ACCOUNTS).await;
    let committed = Arc::new(AtomicU64::new(0));
    let run = transfer_and_audit(&db, label, &committed);
    let ended = tokio::time::timeout(BROKEN_RUN, run).await;
    assert!(
        ended.is_ok(),
        "{label}: the run did not end within {BROKEN_RUN:?}, with {} of {} transfers committed",
        committed.load(Ordering::Relaxed),
        CLIENTS * TRANSFERS
    );
}

/// [`transfers_keep_the_total`] once the accounts are open, counting the transfers
/// committed in `committed`.
async fn transfer_and_audit(
    db: &Mapper<Arc<dyn DocumentStore>>,
    label: &str,
    committed: &Arc<AtomicU64>,
) {
    let expected = INITIAL * i64::try_from(ACCOUNTS).unwrap();
    // Halfway, every client waits while the auditor reads all accounts through a
    // group (so at least one snapshot in the middle of the run, by construction).
    let parties = usize::try_from(CLIENTS).unwrap() + 1;
    let halfway = Arc::new(tokio::sync::Barrier::new(parties));
    let resume = Arc::new(tokio::sync::Barrier::new(parties));
    let mut clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (db, committed) = (db.clone(), committed.clone());
            let (halfway, resume) = (halfway.clone(), resume.clone());
            tokio::spawn(async move {
                let mut rng = rand::rngs::StdRng::seed_from_u64(c);
                let (mut done, mut refused, mut failed, mut in_a_row) = (0, 0u64, 0u64, 0);
                while done < TRANSFERS {
                    let ids = random_ids(&mut rng, ACCOUNTS);
                    match transfer(&db, &ids, &mut rng, Duration::from_secs(30)).await {
                        Ok(()) => {
                            in_a_row = 0;
                            done += 1;
                            committed.fetch_add(1, Ordering::Relaxed);
                            if done == TRANSFERS / 2 {
                                halfway.wait().await;
                                resume.wait().await;
                            }
                        }
                        Err(e) if retried(&e) => {
                            refused += 1;
                            failed += u64::from(!contended(&e));
                            assert!(refused < 100_000, "client {c} never got its group");
                            tokio::time::sleep(backoff(&mut rng, &mut in_a_row)).await;
                        }
                        Err(e) => panic!("client {c}: {e}"),
                    }
                }
                (refused, failed)
            })
        })
        .collect();
    let (mut audits, mut refused, mut failed) = (0, 0, 0);
    let mut paused = false;
    let (mut rng, mut in_a_row) = (rand::rngs::StdRng::seed_from_u64(CLIENTS), 0);
    // Until every client has ended: one that fails ends the test at once, instead of
    // leaving the others waiting for it at the barrier.
    while !clients.is_empty() {
        let (r, f) = join_ended(&mut clients).await;
        (refused, failed) = (refused + r, failed + f);
        if !paused && committed.load(Ordering::Relaxed) >= CLIENTS * (TRANSFERS / 2) {
            // Every client has made its first transfer and waits at the barrier.
            halfway.wait().await;
            let total = audit_when_free(db, &mut rng, &mut in_a_row).await;
            assert_eq!(total, expected, "{label}: the halfway total");
            audits += 1;
            resume.wait().await;
            paused = true;
            continue;
        }
        match audit(db, ACCOUNTS).await {
            Ok(total) => {
                assert_eq!(total, expected, "{label}: a snapshot's total");
                audits += 1;
                tokio::time::sleep(after_audit(&mut rng, &mut in_a_row)).await;
            }
            Err(e) if retried(&e) => {
                tokio::time::sleep(backoff(&mut rng, &mut in_a_row)).await;
            }
            Err(e) => panic!("auditor: {e}"),
        }
    }
    let total = audit_when_free(db, &mut rng, &mut in_a_row).await;
    assert_eq!(total, expected, "{label}: the final total");
    let plain: i64 = db
        .load_many::<Account>(&(1..=ACCOUNTS).collect::<Vec<_>>())
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.unwrap().balance)
        .sum();
    assert_eq!(plain, expected, "{label}: loads after dissolve");
    println!(
        "{label}: {} transfers by {CLIENTS} clients, {refused} creates refused or \
         contended ({failed} of them failed calls), {audits} audits during the run",
        CLIENTS * TRANSFERS
    );
}

autoshard_test_support::every_store!(transfers_keep_the_total);
