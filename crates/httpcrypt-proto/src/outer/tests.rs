use super::*;

/// The cookie pair iterator yields exactly what splitting at `;` does,
/// empty pairs included, on every string up to 6 bytes over `a ; =`.
#[test]
fn cookie_pairs_are_the_split_at_semicolons() {
    fn all(s: &mut Vec<u8>, depth: usize) {
        let ours: Vec<&[u8]> = Pairs(Some(s)).collect();
        let split: Vec<&[u8]> = s.split(|b| *b == b';').collect();
        assert_eq!(ours, split, "{:?}", String::from_utf8_lossy(s));
        if depth == 0 {
            return;
        }
        for c in [b'a', b';', b' ', b'='] {
            s.push(c);
            all(s, depth - 1);
            s.pop();
        }
    }
    all(&mut Vec::new(), 6);
}

/// `check_query` refuses exactly what `decode_query` refuses, on every
/// string up to 5 characters over an alphabet that mixes valid
/// characters (with and without low bits set) and invalid ones.
#[test]
fn check_query_agrees_with_decode_query() {
    let chars = [b'A', b'B', b'Q', b'g', b'w', b'_', b'-', b'=', b'+', b' '];
    let mut s = Vec::new();
    fn all(chars: &[u8], s: &mut Vec<u8>, depth: usize) {
        let text = std::str::from_utf8(s).unwrap();
        assert_eq!(
            check_query(text, 1 << 20).is_ok(),
            decode_query(text, 1 << 20).is_ok(),
            "{text:?}"
        );
        if depth == 0 {
            return;
        }
        for c in chars {
            s.push(*c);
            all(chars, s, depth - 1);
            s.pop();
        }
    }
    all(&chars, &mut s, 5);
    assert_eq!(check_query("AAAAAAAA", 5), Err(Error::BodyTooLarge));
}

#[test]
fn mounts() {
    assert_eq!(Mount::new("").unwrap().as_str(), "");
    assert_eq!(Mount::new("/").unwrap().as_str(), "");
    assert_eq!(Mount::new("hc/").unwrap().as_str(), "/hc");
    assert!(Mount::new("/a?b").is_err());
    let m = Mount::new("/hc").unwrap();
    assert_eq!(
        m.nonce_path(&[0; 24]),
        "/hc/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    );
}

#[test]
fn routing() {
    let m = Mount::new("/hc").unwrap();
    let p = "/hc/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    assert_eq!(route("GET", "/other", &m), Ok(Route::Outside));
    assert_eq!(route("GET", "/hcx/AAAA", &m), Ok(Route::Outside));
    assert_eq!(route("OPTIONS", "/hc/", &m), Ok(Route::Options));
    assert_eq!(route("PUT", p, &m), Ok(Route::MethodNotAllowed));
    assert_eq!(
        route("POST", &format!("{p}?x=1"), &m),
        Ok(Route::Post {
            n0: [0; 24],
            profile: Profile::V1
        })
    );
    // Profile 2: `2` and the 32 characters (spec §4.5).
    assert_eq!(
        route("POST", "/hc/2AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", &m),
        Ok(Route::Post {
            n0: [0; 24],
            profile: Profile::Compact
        })
    );
    assert_eq!(
        route("POST", "/hc/1AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", &m),
        Err(Error::BadNoncePath)
    );
    assert_eq!(
        Mount::new("/hc")
            .unwrap()
            .nonce_path_for(Profile::Compact, &[0; 24]),
        "/hc/2AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    );
    assert_eq!(route("GET", p, &m), Err(Error::BadQuery));
    assert_eq!(
        route("GET", &format!("{p}?abc"), &m),
        Ok(Route::Get {
            n0: [0; 24],
            query: "abc",
            profile: Profile::V1
        })
    );
    assert_eq!(route("POST", "/hc/AAAA", &m), Err(Error::BadNoncePath));
    assert_eq!(
        route("POST", "/hc/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA%41", &m),
        Err(Error::BadNoncePath)
    );
    assert_eq!(
        route("POST", "/hc/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA/", &m),
        Err(Error::BadNoncePath)
    );
    let root = Mount::default();
    assert_eq!(
        route("POST", "/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", &root),
        Ok(Route::Post {
            n0: [0; 24],
            profile: Profile::V1
        })
    );
    assert_eq!(route("GET", "/index.html", &root), Err(Error::BadNoncePath));
}

#[test]
fn cookies() {
    let kid = KeyId([1; 10]);
    let other = KeyId([2; 10]);
    let c = format_cookie(&kid, &[9; 32], "pad", "xy").unwrap();
    let lookup = |id: &KeyId| (*id == kid).then_some(IdKind::Key);
    let fields = [
        format!(
            "a=b; {} ;c",
            format_cookie(&other, &[1; 32], "", "").unwrap()
        ),
        c.clone(),
    ];
    let got = scan_cookies(fields.iter().map(|f| f.as_bytes()), lookup).unwrap();
    assert_eq!(
        got,
        Credential::Key {
            kid,
            client_public: KexPublic([9; 32])
        }
    );
    // A shaped but unknown pair → unknown_key; nothing shaped → no_cookie.
    let unknown = format_cookie(&other, &[1; 32], "", "").unwrap();
    assert_eq!(
        scan_cookies([unknown.as_bytes()], lookup),
        Err(Error::UnknownKey)
    );
    assert_eq!(
        scan_cookies([b"a=b".as_slice()], lookup),
        Err(Error::NoCookie)
    );
    // Known ID with a bad value → bad_cookie.
    let bad = format!("{}=short", kid.to_b64());
    assert_eq!(
        scan_cookies([bad.as_bytes()], lookup),
        Err(Error::BadCookie)
    );
    assert!(format_cookie(&kid, &[0; 32], "=", "").is_err());
    assert!(format_cookie(&kid, &[0; 32], &"a".repeat(17), "").is_err());
}

/// The three cookie forms are told apart by the value's length, pads
/// included (spec §7.3).
#[test]
fn cookie_forms_by_length() {
    for (len, form) in [
        (22, CookieForm::ShortTicket),
        (38, CookieForm::ShortTicket),
        (43, CookieForm::Key),
        (59, CookieForm::Key),
        (115, CookieForm::Ticket),
        (131, CookieForm::Ticket),
    ] {
        assert_eq!(CookieForm::of(&vec![b'A'; len]), form, "{len} characters");
    }
    let key = format!("{}={} ; other=1", "A".repeat(14), "B".repeat(43));
    assert_eq!(CookieForm::of_field(key.as_bytes()), Some(CookieForm::Key));
    assert_eq!(CookieForm::of_field(b"no-pair"), None);
}
