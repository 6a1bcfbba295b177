"""The scxctl daemon: supervises one sched_ext scheduler and answers on a Unix control socket.

Modules, one job each: config (TOML), modes (mode -> pyland options), state (persisted desired
state), exitinfo (why a child stopped), supervisor (child process life cycle), protocol (wire
format), server (socket + peer authorisation), notify (sd_notify), service (request handling and
start-up/shut-down), client (used by the CLI), stats (the readings behind `scxctl stats`), metrics
(the Prometheus text file), dbus_service (scx_loader's org.scx.Loader on the system bus), polkit
(who may call it), arglist (the client-argument allow-list).
"""
