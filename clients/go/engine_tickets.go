package httpcrypt

// The engine's ticket decisions, without IO: which ticket an attempt
// presents (a short one first, spec §7.3, then a v1 one, §7.2; never a
// ticket of a v1 session to a suite-2 key), whether it asks for a new
// short ticket (ShortPolicy: on the first request to a host, on the R-th
// use of the held ticket, once T has passed since its first use), and
// what a `Ticket` field brings. Time is a parameter, as in engine.go.

// heldShort is a short ticket a host gave, with its use so far.
type heldShort struct {
	ticket *ShortTicket
	// hybrid: issued in a suite-2 session, which presenting it resumes
	// (spec/hybrid.md; spec §7.3).
	hybrid bool
	use    shortUse
}

// shortUse is how much a held short ticket has been used: the count and
// clock ShortPolicy is applied to.
type shortUse struct {
	// uses counts the requests that presented it since it arrived or was
	// last asked about.
	uses int
	// since is when that count started (unix seconds): the ticket's first
	// use, or the last request that asked for a new one; counting says
	// whether it has started.
	since    int64
	counting bool
}

// asks says whether a request at now asks for a new short ticket under
// p: on the held ticket's R-th use, or once T has passed since its first.
func (u *shortUse) asks(p ShortPolicy, now int64) bool {
	return u.uses+1 >= p.reuse() || u.counting && now >= u.since+p.maxAge()
}

// used counts one request at now that presented the ticket.
func (u *shortUse) used(now int64) {
	u.uses++
	if !u.counting {
		u.since, u.counting = now, true
	}
}

// asked notes that a request at now asked for a new ticket: the count
// starts again, so requests sent before the new ticket arrives
// (concurrent ones) present this one without asking too.
func (u *shortUse) asked(now int64) {
	u.uses, u.since, u.counting = 0, now, true
}

// ticketChoice is what an attempt presents and whether it asks.
type ticketChoice struct {
	short  *ShortTicket // a short ticket, sealed under its own key k'
	v1     *Ticket      // else a v1 ticket, under v1Key
	v1Key  SessionKey
	hybrid bool // the ticket resumes a suite-2 session
	ask    bool // the inner head carries `Ticket: short`
	// decline: the inner head of a safe request carries `Ticket: none`
	// (Options.OneShot).
	decline bool
}

// chooseTicket decides the ticket an attempt on key server at now
// presents and whether it asks for a short ticket, and counts that use
// in h (the caller holds the engine's lock). With short tickets off
// (Options.NoShortTickets) it never asks and presents the v1 ticket, as
// before §7.3; with tickets off (Options.NoTickets), nothing.
func (e *engine) chooseTicket(h *hostState, server *serverKey, now int64) ticketChoice {
	var c ticketChoice
	if e.opts.OneShot {
		c.decline = true
		return c
	}
	if e.opts.NoTickets {
		return c
	}
	// A ticket of a v1 session would be a classical request: not to a
	// server key of suite 2 (spec/hybrid.md H3, H5).
	presentable := func(hybrid bool) bool { return hybrid || server.hybrid == nil }
	if !e.opts.NoShortTickets {
		s := h.short
		c.ask = s == nil || s.use.asks(e.opts.ShortTickets, now)
		if s != nil && presentable(s.hybrid) {
			c.short, c.hybrid = s.ticket, s.hybrid
			s.use.used(now)
		}
		if c.ask && s != nil {
			s.use.asked(now)
		}
		if c.short != nil {
			return c
		}
	}
	if h.ticket != nil && presentable(h.ticketHybrid) {
		c.v1, c.v1Key, c.hybrid = h.ticket, h.ticketKey, h.ticketHybrid
	}
	return c
}

// tookTicket keeps the ticket of a `Ticket` field v that came in an
// answer to attempt a: its length tells a short ticket (78 characters)
// from a v1 one (128); a new short ticket starts its count afresh and is
// returned (a token in the same answer is bound to its key k', spec §8.4).
// A value that does not parse is ignored.
func (h *hostState) tookTicket(v string, a *attempt) *ShortTicket {
	if isShortTicketField(v) {
		t, err := ParseShortTicketField(v)
		if err == nil {
			h.short = &heldShort{ticket: t, hybrid: a.hybrid}
		}
		return t
	}
	if t, err := ParseTicketField(v); err == nil {
		h.ticket, h.ticketKey, h.ticketHybrid = t, a.k, a.hybrid
	}
	return nil
}

// dropShort forgets the short ticket t if it is still the one held (a
// newer one that arrived meanwhile stays).
func (h *hostState) dropShort(t *ShortTicket) {
	if h.short != nil && h.short.ticket == t {
		h.short = nil
	}
}
