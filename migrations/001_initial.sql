-- placeholder, replaced by the event store's schema
SELECT 1;
