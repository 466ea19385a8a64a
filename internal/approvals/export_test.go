package approvals

// HasWaiter says whether someone waits on approval id (tests decide only once a waiter is
// registered, so the wake-up path is what they test).
func (s *Service) HasWaiter(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.waiters[id]
	return ok
}

// AskWaiting is how many egress connections wait on the pending questions.
func (s *Service) AskWaiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, a := range s.asks {
		n += a.waiting
	}
	return n
}
