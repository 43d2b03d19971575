//! The network between a client and an I/O node: the switch port in front
//! of the node's link (TCP incast, [`ClusterConfig::incast`]), the link
//! itself (FIFO, or shared equally by the pieces crossing it,
//! [`ClusterConfig::fair_share_server_links`]), and the node's request
//! threads ([`ClusterConfig::server_threads`]).

use super::*;

impl<'a> Sim<'a> {
    /// `piece` reaches the switch port of its I/O node: it crosses the
    /// node's link, unless it times out under incast
    /// ([`ClusterConfig::incast`]) and is sent again one timeout later.
    pub(super) fn at_switch(&mut self, now: Time, piece: u32) {
        let p = self.pieces[piece as usize];
        let s = &mut self.servers[p.server as usize];
        if let Some(incast) = self.config.incast {
            let flows = u64::from(s.in_flight - s.stalled);
            if s.incast_rng.unit() < incast.timeout_probability(flows) {
                s.stalled += 1;
                s.incast_timeouts += 1;
                let again = now.saturating_add(incast.retransmit_timeout);
                self.queue.schedule(again, Event::Retransmit { piece });
                return;
            }
        }
        if let Some(link) = s.shared_link.as_mut() {
            let done = link.start(now, u64::from(piece), p.len);
            return self.port_progress(now, p.server, done);
        }
        let arrival = s.link.transfer(now, p.len);
        self.queue.schedule(arrival, Event::AtServer { piece });
    }

    /// Pieces that finished crossing `server`'s shared link travel on to
    /// the node; the link's next finish is scheduled (the earlier one is
    /// stale: the share changed).
    fn port_progress(&mut self, now: Time, server: u32, done: Vec<(u64, Time)>) {
        for (piece, arrival) in done {
            let piece = piece as u32;
            self.queue
                .schedule(arrival.max(now), Event::AtServer { piece });
        }
        let s = &mut self.servers[server as usize];
        s.port_generation += 1;
        let generation = s.port_generation;
        if let Some(finish) = s.shared_link.as_ref().and_then(SharedLink::next_finish) {
            self.queue
                .schedule(finish.max(now), Event::PortDone { server, generation });
        }
    }

    /// Free server threads of `server` take pending requests, each a random
    /// one ([`ClusterConfig::server_threads`]).
    fn take_requests(&mut self, now: Time, server: u32) {
        let threads = self.config.server_threads;
        let busy_for = self.config.server_request_time;
        let s = &mut self.servers[server as usize];
        while s.threads_busy < threads && !s.intake.is_empty() {
            let pick = s.intake_rng.below(s.intake.len() as u64) as usize;
            let piece = s.intake.swap_remove(pick);
            s.threads_busy += 1;
            self.queue
                .schedule(now.saturating_add(busy_for), Event::Handled { piece });
        }
    }

    /// `server`'s shared link reached its next finish, unless the share
    /// changed since it was scheduled (`generation`).
    pub(super) fn port_done(&mut self, now: Time, server: u32, generation: u64) {
        let s = &mut self.servers[server as usize];
        if generation == s.port_generation {
            if let Some(link) = s.shared_link.as_mut() {
                let done = link.advance(now);
                self.port_progress(now, server, done);
            }
        }
    }

    /// `piece` waited out its retransmission timeout: offered again.
    pub(super) fn retransmit(&mut self, now: Time, piece: u32) {
        let server = self.pieces[piece as usize].server;
        self.servers[server as usize].stalled -= 1;
        self.at_switch(now, piece);
    }

    /// `piece` crossed the I/O node's link: handled at once, or queued for
    /// a request thread ([`ClusterConfig::server_threads`]).
    pub(super) fn at_server_port(&mut self, now: Time, piece: u32) {
        let server = self.pieces[piece as usize].server;
        self.servers[server as usize].in_flight -= 1;
        if self.config.server_threads > 0 {
            self.servers[server as usize].intake.push(piece);
            self.take_requests(now, server);
        } else {
            self.at_server(now, piece);
        }
    }

    /// A request thread is done with `piece`: the I/O node takes it, and
    /// the thread takes the next pending request.
    pub(super) fn handled(&mut self, now: Time, piece: u32) {
        let server = self.pieces[piece as usize].server;
        self.servers[server as usize].threads_busy -= 1;
        self.at_server(now, piece);
        self.take_requests(now, server);
    }
}
