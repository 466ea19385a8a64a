package approvals

// HasWaiter says whether someone waits on approval id (tests decide only once a waiter is
// registered, so the wake-up path is what they test).
func (s *Service) HasWaiter(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.waiters[id]
	return ok
}
