package httpcrypt

import (
	"bytes"
	"encoding/hex"
	"testing"
)

func registerRspamdRunners() {
	vectorRunners["rspamd_base32"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		b := hx(in, "hex")
		text := EncodeRspamdBase32(b)
		if back, err := DecodeRspamdBase32(text); err != nil || !bytes.Equal(back, b) {
			t.Fatalf("base32 does not decode back: %v", err)
		}
		return map[string]any{"text": text}, nil
	}
	vectorRunners["rspamd_base32_decode"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		b, err := DecodeRspamdBase32(str(in, "text"))
		if err != nil {
			return nil, err
		}
		return map[string]any{"hex": hex.EncodeToString(b)}, nil
	}
	vectorRunners["rspamd_key_id"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		pub, ok := decodeRspamdKey(str(in, "pubkey"))
		if !ok {
			return nil, errCode(CodeBadBase32)
		}
		id := RspamdKeyID(pub)
		return map[string]any{"id": EncodeRspamdBase32(id[:]), "short_id": EncodeRspamdBase32(id[:5])}, nil
	}
	vectorRunners["rspamd_key_header"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		h, err := ParseRspamdKeyHeader(str(in, "value"))
		if err != nil {
			return nil, err
		}
		if !h.Encrypted {
			return map[string]any{"encrypted": false}, nil
		}
		return map[string]any{"encrypted": true, "short_id": hex.EncodeToString(h.ShortID[:]), "client_public": hex.EncodeToString(h.ClientPublic)}, nil
	}
	vectorRunners["rspamd_keypair"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		kp, err := ParseRspamdKeypair(str(in, "text"))
		if err != nil {
			return nil, err
		}
		return map[string]any{"pubkey": EncodeRspamdBase32(kp.Public)}, nil
	}
	vectorRunners["rspamd_exchange"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		kp, err := ParseRspamdKeypair(str(in, "server_keypair"))
		if err != nil {
			return nil, err
		}
		client, err := NewKexSecret(hx(in, "client_secret"))
		if err != nil {
			return nil, err
		}
		nm, err := client.SessionKey(kp.Public)
		if err != nil {
			return nil, err
		}
		short := kp.ShortID()
		key := EncodeRspamdBase32(short[:]) + "=" + EncodeRspamdBase32(client.Public())
		body := RspamdSeal(nm, n24(hx(in, "nonce")), hx(in, "inner_request"))
		req := append(FormatRspamdRequest(str(in, "host"), key, len(body)), body...)
		// The server's side: the Key header names the key, nm opens the body.
		h, err := ParseRspamdKeyHeader(key)
		if err != nil || h.ShortID != short {
			t.Fatalf("own Key header does not parse back: %v", err)
		}
		snm, err := kp.Secret.SessionKey(h.ClientPublic)
		if err != nil {
			return nil, err
		}
		inner, err := RspamdOpen(snm, body)
		if err != nil || !bytes.Equal(inner, hx(in, "inner_request")) {
			t.Fatalf("server cannot open the request: %v", err)
		}
		rbody := RspamdSeal(snm, n24(hx(in, "response_nonce")), hx(in, "inner_response"))
		back, err := RspamdOpen(nm, rbody)
		if err != nil || !bytes.Equal(back, hx(in, "inner_response")) {
			t.Fatalf("client cannot open the response: %v", err)
		}
		rsp := append(FormatRspamdResponse(len(rbody)), rbody...)
		return map[string]any{"key_header": key, "outer_request": hex.EncodeToString(req), "outer_response": hex.EncodeToString(rsp)}, nil
	}
	vectorRunners["rspamd_open"] = func(t *testing.T, in map[string]any) (map[string]any, error) {
		kp, err := ParseRspamdKeypair(str(in, "keypair"))
		if err != nil {
			return nil, err
		}
		h, err := ParseRspamdKeyHeader(str(in, "key_header"))
		if err != nil {
			return nil, err
		}
		if !h.Encrypted || h.ShortID != kp.ShortID() {
			return nil, ErrUnknownKey
		}
		nm, err := kp.Secret.SessionKey(h.ClientPublic)
		if err != nil {
			return nil, err
		}
		inner, err := RspamdOpen(nm, hx(in, "body"))
		if err != nil {
			return nil, err
		}
		return map[string]any{"inner": hex.EncodeToString(inner)}, nil
	}
}
