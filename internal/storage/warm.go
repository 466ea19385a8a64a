package storage

// DrivesThatFit is how many more drives of size bytes drive admission takes now (each with
// the policy's per-drive share beside it); -1 when it takes any number (overcommit). The
// warm pools ask it before they build, so that they never take the last space.
func (s *Store) DrivesThatFit(size int64) (int64, error) {
	sp, err := s.Space()
	if err != nil {
		return 0, err
	}
	return sp.DrivesThatFit(size, s.policy.PerDrive), nil
}
