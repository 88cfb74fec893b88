// Package replicatest tests several server replicas sharing one PostgreSQL
// database, each with its own store connection pool as separate processes
// would have: leader election, takeover and fencing. It holds tests only;
// they live apart from package server's because they need pgtest.Main as
// their TestMain, and the server's tests have sshtest's.
package replicatest
