package sessionstore

import "time"

// orphanTTL is the life of a session's key written while the session has
// no record (a write racing its Remove, or after it): such a key is
// garbage nothing reads, and it expires.
const orphanTTL = time.Minute
