"""Operations on stored conversations as a whole: importing and exporting them
(:mod:`.transfer`), forgetting and retention (:mod:`.forgetting`), the answers kept for
``Idempotency-Key`` retries (:mod:`.idempotency`), and the sweep (:mod:`.housekeeping`)."""
