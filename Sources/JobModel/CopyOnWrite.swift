/// A value type's fields kept in a shared box: copying the value copies one reference, and a write
/// copies the fields first only when another value shares the box (copy-on-write, as `Array` does).
///
/// `JobSpec`, `JobResult` and `JobRecord` keep their fields here: each is hundreds of bytes of strings
/// and optionals that travel by value through the worker (transfer, task state machine, outcome, payload,
/// the store's records), and every copy of the inline struct moved all of it.
///
/// Equality and hashing are the fields' (two boxes with equal fields are equal; one box is equal to itself
/// without a look at the fields), so an owner whose one stored property is its box gets them synthesized.
/// Coding is the fields' too, at the top level (the owner's `init(from:)` and `encode(to:)` hand the coder
/// to the box), so the box adds no key and no nesting to the JSON.
public struct CopyOnWrite<Fields: Sendable & Hashable>: Sendable, Hashable {
    /// The box. `@unchecked Sendable`: it is written only through `fields`' modify accessor after
    /// `isKnownUniquelyReferenced` said no other value holds it, so no other value (or thread) sees the
    /// write; a shared box is never written.
    ///
    /// `fields` is not checked for exclusive access at run time: a class's stored `var` otherwise is, at
    /// every read (~60 instructions: the access is entered into and removed from a per-thread set), and
    /// the jobs' fields are read dozens of times per job. The box needs no check of its own: it is written
    /// only through the owner's `fields` modify accessor on a box no other value holds, so two accesses to
    /// it overlap only through that one owner, and those are checked where the owner lives (by the
    /// compiler for a local or an argument, at run time for a class's property or a global).
    @usableFromInline
    final class Box: @unchecked Sendable {
        @exclusivity(unchecked) @usableFromInline var fields: Fields

        @inlinable
        init(_ fields: Fields) {
            self.fields = fields
        }
    }

    @usableFromInline var box: Box

    /// Boxes `fields`.
    @inlinable
    public init(_ fields: Fields) {
        box = Box(fields)
    }

    /// The fields: read from the box; written in place when this value is the box's only owner, else
    /// into a fresh box of its own first.
    @inlinable
    public var fields: Fields {
        // Yielded in place: reading one field reads it, without copying (and retaining) every other.
        _read { yield box.fields }
        _modify {
            if !isKnownUniquelyReferenced(&box) { box = Box(box.fields) }
            yield &box.fields
        }
    }

    /// The box's identity, for tests that check a copy shares it and an unshared value keeps it.
    public var identity: ObjectIdentifier { ObjectIdentifier(box) }

    @inlinable
    public static func == (lhs: CopyOnWrite, rhs: CopyOnWrite) -> Bool {
        lhs.box === rhs.box || lhs.box.fields == rhs.box.fields
    }

    @inlinable
    public func hash(into hasher: inout Hasher) {
        box.fields.hash(into: &hasher)
    }
}

extension CopyOnWrite: Codable where Fields: Codable {
    /// Decodes the fields at the top level: the box adds no key and no nesting, so an owner that codes
    /// itself through its box reads and writes the JSON its plain fields would.
    public init(from decoder: any Decoder) throws {
        self.init(try Fields(from: decoder))
    }

    public func encode(to encoder: any Encoder) throws {
        try box.fields.encode(to: encoder)
    }
}

extension CopyOnWrite {
    /// A mirror of `owner` that shows the fields as its children: `print`, `dump` and test failures show
    /// the owner as they did when the fields were its stored properties.
    public func mirror(of owner: Any) -> Mirror {
        Mirror(owner, children: Mirror(reflecting: box.fields).children, displayStyle: .struct)
    }
}
