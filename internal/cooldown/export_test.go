package cooldown

// The scripts, for tests that lose their replies.
var (
	AdmitScript  = admitScript
	SettleScript = settleScript
)
