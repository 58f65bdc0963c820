-- The trace context of the decision that wrote an outbox row, so the Advice published later (by the
-- outbox publisher, outside that decision) continues the recovery's trace.
ALTER TABLE outbox ADD COLUMN traceparent text;
