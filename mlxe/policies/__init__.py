"""Multi-agent runs: which agent acts with which policy, rule policies, and the policy manager
that trains one Algorithm per learned policy (MARO's policy layer on MLxE's two contracts)."""
