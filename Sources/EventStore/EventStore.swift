// EventStore module
