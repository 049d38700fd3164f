use std::net::IpAddr;

use super::*;
use crate::error::Error;

const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 7));

fn config() -> AdmissionConfig {
    AdmissionConfig {
        threshold: 100,
        hold_ms: 1000,
        prefix_rate: 10,
        prefix_burst: 5,
        table_slots: 64,
        max_difficulty: 12,
        ..AdmissionConfig::default()
    }
}

fn echo_for(c: &AdmitCookie, n0: &[u8; 24]) -> String {
    let s = solve_puzzle(c, n0, 0, 1 << 20).expect("solvable");
    format_echo(c, &s)
}

#[test]
fn prefixes() {
    let p = |s: &str| prefix_of(s.parse().unwrap(), 24, 64);
    assert_eq!(p("10.1.2.3"), p("10.1.2.200"));
    assert_ne!(p("10.1.2.3"), p("10.1.3.3"));
    assert_eq!(p("2001:db8::1"), p("2001:db8::ffff:1"));
    assert_ne!(p("2001:db8:0:1::1"), p("2001:db8:0:2::1"));
    assert_eq!(
        prefix_of("10.1.2.3".parse().unwrap(), 20, 64),
        prefix_of("10.1.15.3".parse().unwrap(), 20, 64)
    );
}

#[test]
fn find_echo_picks_the_pair() {
    let fields: [&[u8]; 2] = [b"a=b; abcdefghijklmn=x", b" hc1-admit = AAAA ;c=d"];
    assert_eq!(find_echo(fields), Some(&b"AAAA"[..]));
    assert_eq!(find_echo([&b"hc1-admitx=1"[..]]), None);
}

#[test]
fn idle_admits_everything_without_cookies() {
    let mut a = Admission::new(config(), [1; 32], [2; 16], 1_000_000);
    for i in 0..100 {
        assert_eq!(
            a.judge(1_000_000 + i * 10, A, &[0; 24], None),
            Verdict::Admit
        );
    }
    assert_eq!(a.counts().challenged, 0);
}

/// Demand above the threshold turns the defence on; the challenge is
/// answered with an echo; it turns off after the hold time.
#[test]
fn switches_on_challenges_and_switches_off() {
    let mut a = Admission::new(config(), [1; 32], [2; 16], 1_000_000);
    let mut t = 1_000_000;
    // 200 requests within 400 ms: above the threshold of 100/s.
    let mut challenged = None;
    for _ in 0..200 {
        t += 2;
        if let Verdict::Challenge(c) = a.judge(t, A, &[0; 24], None) {
            challenged = Some(c);
        }
    }
    let c = challenged.expect("the defence switched on");
    let n0 = [9u8; 24];
    let echo = echo_for(&c, &n0);
    assert_eq!(
        a.judge(t, A, &n0, Some(echo.as_bytes())),
        Verdict::Admit,
        "a solved echo from the same address is admitted"
    );
    let other: IpAddr = "192.0.2.8".parse().unwrap();
    assert!(matches!(
        a.judge(t, other, &n0, Some(echo.as_bytes())),
        Verdict::Challenge(_)
    ));
    assert!(
        matches!(
            a.judge(t, A, &[8; 24], Some(echo.as_bytes())),
            Verdict::Challenge(_)
        ) || c.difficulty() == 0,
        "the puzzle binds the nonce"
    );
    // Quiet for the hold time: off again, everything admitted.
    t += 3000;
    assert_eq!(a.judge(t, A, &[0; 24], None), Verdict::Admit);
}

#[test]
fn budgets_limit_a_prefix_and_refill() {
    let mut a = Admission::new(config(), [1; 32], [2; 16], 1_000_000);
    let mut t = 1_000_000;
    for _ in 0..150 {
        t += 1;
        a.judge(t, A, &[0; 24], None);
    }
    assert!(a.is_on(t));
    let mut admitted = 0;
    let mut busy = 0;
    for i in 0..20u8 {
        let n0 = [i; 24];
        let Verdict::Challenge(c) = a.judge(t, A, &n0, None) else {
            panic!("expected a challenge");
        };
        let echo = echo_for(&c, &n0);
        match a.judge(t, A, &n0, Some(echo.as_bytes())) {
            Verdict::Admit => admitted += 1,
            Verdict::Busy { retry_after_ms } => {
                assert!((1..=100).contains(&retry_after_ms));
                busy += 1
            }
            v => panic!("{v:?}"),
        }
    }
    assert_eq!((admitted, busy), (5, 15), "burst of 5, then busy");
    // Another /24 has its own budget.
    let b: IpAddr = "192.0.3.7".parse().unwrap();
    let Verdict::Challenge(c) = a.judge(t, b, &[1; 24], None) else {
        panic!("expected a challenge");
    };
    let echo = echo_for(&c, &[1; 24]);
    assert_eq!(
        a.judge(t, b, &[1; 24], Some(echo.as_bytes())),
        Verdict::Admit
    );
}

#[test]
fn cookies_expire_and_rotate() {
    let secret = [3u8; 32];
    let n0 = [0u8; 24];
    let c = issue_cookie(&secret, 100, 0, A);
    let echo = format_echo(&c, &[0; 8]);
    assert!(verify_echo(&[&secret], 100, A, &n0, echo.as_bytes()).is_ok());
    assert!(verify_echo(&[&secret], 101, A, &n0, echo.as_bytes()).is_ok());
    assert_eq!(
        verify_echo(&[&secret], 102, A, &n0, echo.as_bytes()),
        Err(Error::BadAdmission)
    );
    assert_eq!(
        verify_echo(&[&secret], 99, A, &n0, echo.as_bytes()),
        Err(Error::BadAdmission),
        "from the future"
    );
    assert_eq!(
        verify_echo(&[&[4; 32]], 100, A, &n0, echo.as_bytes()),
        Err(Error::BadAdmission)
    );
    // A raised difficulty invalidates the MAC.
    let mut raised = c;
    raised.0[4] = 1;
    assert_eq!(
        verify_echo(
            &[&secret],
            100,
            A,
            &n0,
            format_echo(&raised, &[0; 8]).as_bytes()
        ),
        Err(Error::BadAdmission)
    );
}

/// A roomy budget, so that one address can make proven demand.
fn roomy() -> AdmissionConfig {
    AdmissionConfig {
        prefix_rate: 100_000,
        prefix_burst: 100_000,
        ..config()
    }
}

/// `n` echoes of `cookie` from `addr`, each for its own nonce.
fn echo_many(a: &mut Admission, t: u64, addr: IpAddr, cookie: &AdmitCookie, n: u32) {
    for k in 0..n {
        let mut n0 = [0u8; 24];
        n0[..4].copy_from_slice(&k.to_le_bytes());
        let e = echo_for(cookie, &n0);
        a.judge(t, addr, &n0, Some(e.as_bytes()));
    }
}

#[test]
fn difficulty_follows_the_proven_demand() {
    let mut a = Admission::new(roomy(), [1; 32], [2; 16], 0);
    let t = 1_000;
    // Junk alone (no echo) switches the defence on but never the puzzle:
    // it is refused before any key agreement.
    for _ in 0..5000 {
        a.judge(t, A, &[0; 24], None);
    }
    assert!(a.is_on(t));
    assert_eq!(a.difficulty(t), 0, "junk: cookie only");
    let Verdict::Challenge(c) = a.judge(t, A, &[0; 24], None) else {
        panic!("the defence is on")
    };
    assert_eq!(c.difficulty(), 0);
    // Echoing clients: between 1x and 2x of the threshold, cookie only.
    echo_many(&mut a, t, A, &c, 150);
    assert_eq!(a.proven_demand(t), 150);
    assert_eq!(a.difficulty(t), 0);
    // 2x to 4x: 10 bits (cheap echoes still count: they proved the path).
    echo_many(&mut a, t, A, &c, 100);
    assert_eq!(a.difficulty(t), 10);
    echo_many(&mut a, t, A, &c, 1000);
    assert_eq!(a.difficulty(t), 12, "capped at max_difficulty");
    // A second later the meter has forgotten them.
    assert_eq!(a.difficulty(t + 1_100), 0);
}

#[test]
fn one_prefix_cannot_raise_the_puzzle_beyond_its_budget() {
    // Budget of 5 per /24: a thousand echoes from one address count
    // five times; another prefix's newcomers still see no puzzle.
    let mut a = Admission::new(config(), [1; 32], [2; 16], 0);
    let t = 1_000;
    for _ in 0..500 {
        a.judge(t, A, &[0; 24], None);
    }
    let Verdict::Challenge(c) = a.judge(t, A, &[0; 24], None) else {
        panic!("the defence is on")
    };
    echo_many(&mut a, t, A, &c, 1000);
    assert_eq!(a.proven_demand(t), 5);
    assert_eq!(a.difficulty(t), 0);
    let other: IpAddr = "198.51.100.9".parse().unwrap();
    match a.judge(t, other, &[0; 24], None) {
        Verdict::Challenge(c) => assert_eq!(c.difficulty(), 0),
        v => panic!("{v:?}"),
    }
}

#[test]
fn a_cookie_below_the_difficulty_in_force_is_challenged_again() {
    let mut a = Admission::new(roomy(), [1; 32], [2; 16], 0);
    let t = 1_000;
    for _ in 0..150 {
        a.judge(t, A, &[0; 24], None);
    }
    assert_eq!(a.difficulty(t), 0);
    let Verdict::Challenge(cheap) = a.judge(t, A, &[0; 24], None) else {
        panic!("the defence is on")
    };
    assert_eq!(cheap.difficulty(), 0);
    let n0 = [9u8; 24];
    let echo = echo_for(&cheap, &n0);
    assert_eq!(a.judge(t, A, &n0, Some(echo.as_bytes())), Verdict::Admit);
    // The proven load rises: the same cheap cookie no longer admits.
    echo_many(&mut a, t, A, &cheap, 250);
    assert_eq!(a.difficulty(t), 10);
    let n1 = [10u8; 24];
    let echo = echo_for(&cheap, &n1);
    match a.judge(t, A, &n1, Some(echo.as_bytes())) {
        Verdict::Challenge(c) => assert_eq!(c.difficulty(), 10),
        v => panic!("expected a new challenge, got {v:?}"),
    }
}

#[test]
fn an_echo_is_judged_at_the_price_before_it_arrived() {
    // Threshold 1: the second proven echo crosses 2x the threshold, yet
    // it is judged at the difficulty in force before it (0) and admitted.
    let mut a = Admission::new(
        AdmissionConfig {
            threshold: 1,
            ..config()
        },
        [1; 32],
        [2; 16],
        0,
    );
    let t = 1_000;
    for _ in 0..3 {
        a.judge(t, A, &[0; 24], None);
    }
    let Verdict::Challenge(c) = a.judge(t, A, &[0; 24], None) else {
        panic!("the defence is on")
    };
    assert_eq!(c.difficulty(), 0);
    for n in 1..=2u8 {
        let n0 = [n; 24];
        let echo = echo_for(&c, &n0);
        assert_eq!(a.judge(t, A, &n0, Some(echo.as_bytes())), Verdict::Admit);
    }
    assert_eq!(a.proven_demand(t), 2);
    assert_eq!(a.difficulty(t), 10);
}

#[test]
fn refusal_documents_round_trip() {
    let c = issue_cookie(&[5; 32], 7, 11, A);
    let mut s = String::new();
    format_refusal(&Verdict::Challenge(c), &mut s);
    assert_eq!(parse_refusal(s.as_bytes()), Ok(Refusal::Admission(c)));
    format_refusal(
        &Verdict::Busy {
            retry_after_ms: 1500,
        },
        &mut s,
    );
    assert_eq!(parse_refusal(s.as_bytes()), Ok(Refusal::Busy(2)));
    assert!(parse_refusal(b"{}").is_err());
}
