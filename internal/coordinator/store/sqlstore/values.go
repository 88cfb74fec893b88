package sqlstore

// nullString stores an empty string as NULL, for optional foreign keys.
func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
