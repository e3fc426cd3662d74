;; A component that exports no `run`: it compiles (and is cached and handed to its members), and
;; fails only when a member checks it against the host (E-RUN-002, before the session is staged).
(component)
