import CYAML

// MARK: - Results

/// Something wrong with the YAML itself, found while building the node tree.
struct YAMLProblem: Sendable, Hashable {
    enum Kind: Sendable, Hashable {
        /// libyaml refused the text (its problem text, at its mark).
        case syntax
        /// A key written twice in one mapping.
        case duplicateKey
        /// Valid YAML this reader does not take: several documents, unknown aliases, bad merges.
        case unsupported
        /// Past one of the `ManifestLimits`: too deep, too many nodes, a scalar too long, an alias bomb.
        case limitExceeded
    }

    var kind: Kind
    var message: String
    var mark: SourceMark
}

/// The single document of a manifest: its root (nil for an empty stream or after a syntax error) and
/// every problem found. Duplicate keys do not stop the parse; syntax errors do.
struct YAMLDocument: Sendable {
    var root: YAMLNode?
    var problems: [YAMLProblem]
}

// MARK: - Parser

/// Reads one YAML document into a `YAMLNode` tree with libyaml's event API.
///
/// The only type that touches libyaml: it owns the `yaml_parser_t` and frees it in `deinit`. One parser
/// parses once. See <https://pyyaml.org/wiki/LibYAML> and `yaml.h` (`yaml_parser_parse`).
///
/// libyaml reads the text through `InputFeed`, a read handler over the source's own bytes (no copy),
/// which also bounds how much text libyaml may read for one event: libyaml builds a whole scalar before
/// it hands it over, so a 50 MB `data:` was refused only once libyaml held it (about 490 MB of memory
/// with the copies of the text). The feed stops libyaml at `ManifestLimits.maximumScalarTextBytes`.
final class YAMLParser {
    private let limits: ManifestLimits
    private let parser: UnsafeMutablePointer<yaml_parser_t>
    private let feed: InputFeed
    private let isInitialized: Bool
    private let source: SourceText
    /// Where the last event ended: where the text that crossed `maximumScalarTextBytes` began.
    private var lastEventEnd = SourceMark.start

    /// The text libyaml reads, handed over in the pieces it asks for, and the byte after which it may
    /// read no more before the next event.
    private final class InputFeed {
        let bytes: [UInt8]
        var offset = 0
        var end = Int.max
        var overran = false

        init(bytes: [UInt8]) {
            self.bytes = bytes
        }

        /// libyaml's read handler: up to `size` bytes into `buffer`; none at the end of the text; an
        /// error (0) once the text for one event is longer than allowed.
        static func read(_ data: UnsafeMutableRawPointer?, _ buffer: UnsafeMutablePointer<UInt8>?, _ size: Int,
                         _ sizeRead: UnsafeMutablePointer<Int>?) -> Int32 {
            guard let data, let buffer, let sizeRead else { return 0 }
            let feed = Unmanaged<InputFeed>.fromOpaque(data).takeUnretainedValue()
            let count = min(size, feed.bytes.count - feed.offset, max(0, feed.end - feed.offset))
            if count == 0 && feed.offset < feed.bytes.count {
                feed.overran = true
                return 0
            }
            feed.bytes.withUnsafeBufferPointer { bytes in
                buffer.update(from: bytes.baseAddress! + feed.offset, count: count)
            }
            feed.offset += count
            sizeRead.pointee = count
            return 1
        }
    }

    /// What a second document is told: the file is a manifest unless the reader says otherwise.
    let secondDocumentMessage: String

    init(source: SourceText, limits: ManifestLimits = .default,
         secondDocumentMessage: String = "a manifest is one YAML document, but a second one starts here; put all jobs under one 'jobs:' list") {
        self.source = source
        self.limits = limits
        self.secondDocumentMessage = secondDocumentMessage
        parser = .allocate(capacity: 1)
        parser.initialize(to: yaml_parser_t())
        feed = InputFeed(bytes: source.bytes)
        feed.end = limits.maximumScalarTextBytes
        // yaml_parser_initialize fails only when it cannot allocate its buffers.
        isInitialized = yaml_parser_initialize(parser) != 0
        if isInitialized {
            yaml_parser_set_input(parser, { InputFeed.read($0, $1, $2, $3) }, Unmanaged.passUnretained(feed).toOpaque())
        }
    }

    deinit {
        if isInitialized { yaml_parser_delete(parser) }
        parser.deinitialize(count: 1)
        parser.deallocate()
    }

    // MARK: - Events

    /// A libyaml event copied into Swift values, so nothing borrowed outlives `yaml_event_delete`.
    private enum Event {
        case streamStart, streamEnd, documentEnd
        case documentStart(SourceMark)
        case alias(anchor: String, mark: SourceMark)
        case scalar(YAMLScalar, anchor: String?)
        case sequenceStart(anchor: String?, mark: SourceMark)
        case sequenceEnd
        case mappingStart(anchor: String?, mark: SourceMark)
        case mappingEnd
    }

    private struct ParseFailure: Error {
        var problem: YAMLProblem
    }

    /// The next event; every libyaml return code is checked here.
    private func nextEvent() throws(ParseFailure) -> Event {
        guard isInitialized else {
            throw ParseFailure(problem: YAMLProblem(kind: .syntax, message: "libyaml could not allocate its parser", mark: .start))
        }
        var event = yaml_event_t()
        guard yaml_parser_parse(parser, &event) != 0 else {
            if feed.overran { throw ParseFailure(problem: overrun()) }
            throw ParseFailure(problem: currentProblem())
        }
        defer { yaml_event_delete(&event) }
        // The next event may take this much more text (libyaml reads ahead a buffer, 16 KiB, at most).
        feed.end = feed.offset.addingReportingOverflow(limits.maximumScalarTextBytes).partialValue
        lastEventEnd = Self.mark(event.end_mark)
        let mark = Self.mark(event.start_mark)
        switch event.type {
        case YAML_STREAM_START_EVENT:
            return .streamStart
        case YAML_STREAM_END_EVENT, YAML_NO_EVENT:
            return .streamEnd
        case YAML_DOCUMENT_START_EVENT:
            return .documentStart(mark)
        case YAML_DOCUMENT_END_EVENT:
            return .documentEnd
        case YAML_ALIAS_EVENT:
            return .alias(anchor: Self.string(event.data.alias.anchor) ?? "", mark: mark)
        case YAML_SCALAR_EVENT:
            let data = event.data.scalar
            // Checked before the bytes are copied: the copy is what a huge scalar would cost.
            guard data.length <= limits.maximumScalarBytes else {
                throw ParseFailure(problem: YAMLProblem(
                    kind: .limitExceeded,
                    message: "this scalar is \(data.length) bytes long, more than the limit of \(limits.maximumScalarBytes); "
                        + "upload a file this large with an upload-file job",
                    mark: mark))
            }
            let value = data.value.map { String(decoding: UnsafeBufferPointer(start: $0, count: data.length), as: UTF8.self) } ?? ""
            let style: ScalarStyle = switch data.style {
            case YAML_SINGLE_QUOTED_SCALAR_STYLE: .singleQuoted
            case YAML_DOUBLE_QUOTED_SCALAR_STYLE: .doubleQuoted
            case YAML_LITERAL_SCALAR_STYLE: .literal
            case YAML_FOLDED_SCALAR_STYLE: .folded
            default: .plain
            }
            // The non-specific tag `!` only says "not plain"; the style already records that.
            let tag = Self.string(data.tag).flatMap { $0 == "!" ? nil : $0 }
            try Self.checkTag(tag, allowed: Self.scalarTags, at: mark)
            return .scalar(YAMLScalar(value: value, style: style, tag: tag, mark: mark), anchor: Self.string(data.anchor))
        case YAML_SEQUENCE_START_EVENT:
            try Self.checkTag(Self.string(event.data.sequence_start.tag), allowed: ["!", "tag:yaml.org,2002:seq"], at: mark)
            return .sequenceStart(anchor: Self.string(event.data.sequence_start.anchor), mark: mark)
        case YAML_SEQUENCE_END_EVENT:
            return .sequenceEnd
        case YAML_MAPPING_START_EVENT:
            try Self.checkTag(Self.string(event.data.mapping_start.tag), allowed: ["!", "tag:yaml.org,2002:map"], at: mark)
            return .mappingStart(anchor: Self.string(event.data.mapping_start.anchor), mark: mark)
        case YAML_MAPPING_END_EVENT:
            return .mappingEnd
        default:
            return .streamEnd
        }
    }

    /// The problem of text past `maximumScalarTextBytes` without an event: a scalar far too long (or
    /// that much comment or blank text), reported where it began: after the last event or token.
    private func overrun() -> YAMLProblem {
        // libyaml may have scanned tokens past the last event (looking for a `:` after a possible key):
        // the text began after the last of them.
        var mark = lastEventEnd
        let tokens = parser.pointee.tokens
        if let head = tokens.head, let tail = tokens.tail, tail > head {
            mark = max(mark, Self.mark((tail - 1).pointee.end_mark))
        }
        return YAMLProblem(
            kind: .limitExceeded,
            message: "more than \(limits.maximumScalarTextBytes) bytes of text follow here before the next value ends: a scalar "
                + "longer than the limit of \(limits.maximumScalarBytes) bytes (or that much comment or blank text); "
                + "upload a file this large with an upload-file job",
            mark: mark)
    }

    /// libyaml's description of why it stopped, at its mark, with a hint for the classic mistake (tabs).
    private func currentProblem() -> YAMLProblem {
        let state = parser.pointee
        let problem = Self.string(state.problem) ?? "libyaml failed without saying why"
        var mark: SourceMark
        if state.error == YAML_READER_ERROR {
            // Reader errors carry a byte offset, not a mark.
            mark = source.mark(atByteOffset: state.problem_offset)
        } else {
            mark = Self.mark(state.problem_mark)
        }
        var message = problem
        if source.scalar(at: mark) == "\t" {
            message = "tab character here: YAML indents with spaces only (libyaml: \(problem))"
        } else if let context = Self.string(state.context) {
            let contextMark = Self.mark(state.context_mark)
            if source.isBlank(from: mark) {
                // The end of the text is no place to look; where the unclosed thing began is.
                message = "\(problem) \(context) that starts here; is something left unclosed?"
                mark = contextMark
            } else {
                message += " (\(context) at line \(contextMark.line), column \(contextMark.column))"
            }
        }
        if state.error == YAML_MEMORY_ERROR { mark = .start }
        return YAMLProblem(kind: .syntax, message: message, mark: mark)
    }

    private static func mark(_ mark: yaml_mark_t) -> SourceMark {
        SourceMark(line: Int(mark.line) + 1, column: Int(mark.column) + 1)
    }

    /// The scalar tags the manifest reader gives a meaning to (YAML's core types and `!!binary`).
    static let scalarTags: Set<String> = ["tag:yaml.org,2002:str", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
                                          "tag:yaml.org,2002:bool", "tag:yaml.org,2002:null", "tag:yaml.org,2002:binary"]

    /// Refuses a tag outside `allowed`: an application tag (`!secret`), or a YAML type jobctl does not
    /// read (`!!set`, `!!timestamp`), would otherwise be dropped and its value taken as plain text.
    private static func checkTag(_ tag: String?, allowed: Set<String>, at mark: SourceMark) throws(ParseFailure) {
        guard let tag, !allowed.contains(tag) else { return }
        let shown = YAMLScalar.shown(tag: tag)
        let known = allowed.contains("tag:yaml.org,2002:str") ? "a value takes !!str, !!int, !!float, !!bool, !!null or !!binary"
            : allowed.contains("tag:yaml.org,2002:seq") ? "a sequence takes only !!seq" : "a mapping takes only !!map"
        throw ParseFailure(problem: YAMLProblem(
            kind: .unsupported,
            message: "the tag '\(shown.prefix(200))' is not one jobctl reads (\(known)); remove it",
            mark: mark))
    }

    private static func string(_ pointer: UnsafeMutablePointer<UInt8>?) -> String? {
        pointer.map { String(cString: $0) }
    }

    private static func string(_ pointer: UnsafePointer<CChar>?) -> String? {
        pointer.map { String(cString: $0) }
    }

    // MARK: - Tree building

    /// A collection being read: its children so far, where it started, and its anchor.
    private struct Frame {
        var isMapping: Bool
        var items: [YAMLNode] = []
        var pairs: [YAMLPair] = []
        var pendingKey: YAMLNode?
        var mark: SourceMark
        var anchor: String?
        /// `treeNodes` and `treeBytes` when the collection opened, so its own size is known when it closes.
        var treeNodesAtStart: Int
        var treeBytesAtStart: Int
        /// The tallest child so far, in levels of collections (a scalar is 0).
        var childHeight = 0
    }

    /// An anchored node, with what an alias to it adds to the tree.
    private struct Anchored {
        var node: YAMLNode
        /// Nodes in its subtree, aliases inside it expanded.
        var size: Int
        /// Bytes of scalar text in its subtree, aliases inside it expanded.
        var bytes: Int
        /// Levels of collections in it (a scalar is 0, `[a]` is 1).
        var height: Int
    }

    private var stack: [Frame] = []
    private var anchors: [String: Anchored] = [:]
    private var openAnchors: Set<String> = []
    /// Nodes written in the text.
    private var writtenNodes = 0
    /// Nodes added by aliases (each alias adds its anchor's whole subtree).
    private var aliasNodes = 0
    /// Nodes of the tree as consumers see it: written plus alias-added.
    private var treeNodes: Int { writtenNodes + aliasNodes }
    /// Bytes of scalar text written, and repeated by aliases: an alias to a long scalar repeats its bytes.
    private var writtenBytes = 0
    private var aliasBytes = 0
    private var treeBytes: Int { writtenBytes + aliasBytes }
    private var root: YAMLNode?
    private var problems: [YAMLProblem] = []

    /// Reads the stream. A second document, a syntax error, an unknown alias or a crossed limit ends the
    /// parse with a problem; duplicate keys are reported and the first value kept.
    ///
    /// Nothing here recurses: collections are built on an explicit stack whose depth (aliases included)
    /// is checked against `ManifestLimits.maximumDepth` before a collection is opened, and every event
    /// costs constant work besides copying its own value.
    func parseDocument() -> YAMLDocument {
        do throws(ParseFailure) {
            var documents = 0
            loop: while true {
                switch try nextEvent() {
                case .streamStart, .documentEnd:
                    continue
                case .streamEnd:
                    break loop
                case .documentStart(let mark):
                    documents += 1
                    if documents > 1 {
                        throw ParseFailure(problem: YAMLProblem(
                            kind: .unsupported,
                            message: secondDocumentMessage,
                            mark: mark))
                    }
                case .scalar(let scalar, let anchor):
                    try countWrittenNode(at: scalar.mark)
                    writtenBytes += scalar.value.utf8.count
                    complete(.scalar(scalar), anchor: anchor, size: 1, bytes: scalar.value.utf8.count, height: 0)
                case .alias(let anchor, let mark):
                    try resolveAlias(anchor, at: mark)
                case .sequenceStart(let anchor, let mark):
                    try open(isMapping: false, anchor: anchor, mark: mark)
                case .mappingStart(let anchor, let mark):
                    try open(isMapping: true, anchor: anchor, mark: mark)
                case .sequenceEnd, .mappingEnd:
                    guard let frame = stack.popLast() else { continue }
                    if let anchor = frame.anchor { openAnchors.remove(anchor) }
                    let node: YAMLNode = frame.isMapping
                        ? .mapping(finishMapping(frame.pairs), frame.mark)
                        : .sequence(frame.items, frame.mark)
                    complete(node, anchor: frame.anchor, size: treeNodes - frame.treeNodesAtStart,
                             bytes: treeBytes - frame.treeBytesAtStart, height: frame.childHeight + 1)
                }
            }
            return YAMLDocument(root: root, problems: problems)
        } catch {
            return YAMLDocument(root: nil, problems: problems + [error.problem])
        }
    }

    private func open(isMapping: Bool, anchor: String?, mark: SourceMark) throws(ParseFailure) {
        // The collection opened here sits at depth `stack.count + 1`.
        guard stack.count < limits.maximumDepth else {
            throw ParseFailure(problem: YAMLProblem(
                kind: .limitExceeded,
                message: "collections nest more than \(limits.maximumDepth) levels deep here; a manifest needs about five "
                    + "(jobs, a job, metadata, custom_metadata)",
                mark: mark))
        }
        try countWrittenNode(at: mark)
        if let anchor { openAnchors.insert(anchor) }
        stack.append(Frame(isMapping: isMapping, mark: mark, anchor: anchor, treeNodesAtStart: treeNodes - 1, treeBytesAtStart: treeBytes))
    }

    private func resolveAlias(_ anchor: String, at mark: SourceMark) throws(ParseFailure) {
        guard let anchored = anchors[anchor] else {
            let message = openAnchors.contains(anchor)
                ? "alias '*\(anchor)' refers to the collection that contains it; recursive structures are not supported"
                : "alias '*\(anchor)' refers to no anchor; define '&\(anchor)' before using it"
            throw ParseFailure(problem: YAMLProblem(kind: .unsupported, message: message, mark: mark))
        }
        // The alias puts the anchor's whole subtree here: as deep as written below this point.
        if stack.count + anchored.height > limits.maximumDepth {
            throw ParseFailure(problem: YAMLProblem(
                kind: .limitExceeded,
                message: "alias '*\(anchor)' nests collections more than \(limits.maximumDepth) levels deep here; "
                    + "a manifest needs about five (jobs, a job, metadata, custom_metadata)",
                mark: mark))
        }
        aliasNodes += anchored.size
        // Linear in what was written, so consumers walk at most a bounded multiple of the text.
        let proportional = limits.aliasExpansionFactor.multipliedReportingOverflow(by: writtenNodes)
        let allowed = min(max(limits.maximumAliasNodes, proportional.overflow ? .max : proportional.partialValue), limits.maximumNodes)
        if aliasNodes > allowed {
            throw ParseFailure(problem: YAMLProblem(
                kind: .limitExceeded,
                message: "aliases expand the document by more than \(allowed) nodes (this one adds \(anchored.size)); "
                    + "that is an alias bomb or close to one: write the repeated parts out, or alias smaller pieces",
                mark: mark))
        }
        // Few nodes can still be many bytes: an alias to a 16 MiB `data:` scalar in every job.
        aliasBytes += anchored.bytes
        if aliasBytes > limits.maximumBytes {
            throw ParseFailure(problem: YAMLProblem(
                kind: .limitExceeded,
                message: "aliases repeat more than \(limits.maximumBytes) bytes of text in all (this one \(anchored.bytes)); "
                    + "write the repeated parts out, or alias smaller pieces",
                mark: mark))
        }
        attach(anchored.node, height: anchored.height)
    }

    private func countWrittenNode(at mark: SourceMark) throws(ParseFailure) {
        writtenNodes += 1
        if writtenNodes > limits.maximumNodes {
            throw ParseFailure(problem: YAMLProblem(
                kind: .limitExceeded,
                message: "the manifest holds more than \(limits.maximumNodes) YAML nodes; split it into several manifests "
                    + "(jobctl submit takes them all in one transaction)",
                mark: mark))
        }
    }

    private func complete(_ node: YAMLNode, anchor: String?, size: Int, bytes: Int, height: Int) {
        if let anchor { anchors[anchor] = Anchored(node: node, size: size, bytes: bytes, height: height) }
        attach(node, height: height)
    }

    private func attach(_ node: YAMLNode, height: Int) {
        guard !stack.isEmpty else {
            root = node
            return
        }
        let top = stack.count - 1
        stack[top].childHeight = max(stack[top].childHeight, height)
        if !stack[top].isMapping {
            stack[top].items.append(node)
        } else if let key = stack[top].pendingKey {
            stack[top].pairs.append(YAMLPair(key: key, value: node))
            stack[top].pendingKey = nil
        } else {
            stack[top].pendingKey = node
        }
    }

    /// Drops (and reports) repeated keys, then applies `<<` merge keys: merged pairs never override
    /// keys written in the mapping itself, and earlier merge sources win over later ones.
    private func finishMapping(_ pairs: [YAMLPair]) -> [YAMLPair] {
        var result: [YAMLPair] = []
        var seen: [String: SourceMark] = [:]
        var merges: [YAMLNode] = []
        for pair in pairs {
            guard case .scalar(let key) = pair.key else {
                result.append(pair)
                continue
            }
            if key.style == .plain, key.tag == nil, key.value == "<<" {
                merges.append(pair.value)
                continue
            }
            if let first = seen[key.value] {
                problems.append(YAMLProblem(
                    kind: .duplicateKey,
                    message: "duplicate key '\(key.value)' (first written at line \(first.line), column \(first.column)); write each key once",
                    mark: key.mark))
                continue
            }
            seen[key.value] = key.mark
            result.append(pair)
        }
        for merge in merges {
            let sources: [YAMLNode]
            switch merge {
            case .mapping: sources = [merge]
            case .sequence(let items, _): sources = items
            case .scalar: sources = [merge]
            }
            for source in sources {
                guard case .mapping(let mergedPairs, _) = source else {
                    problems.append(YAMLProblem(
                        kind: .unsupported,
                        message: "'<<' merges a mapping (or a list of mappings), not \(source.summary)",
                        mark: source.mark))
                    continue
                }
                for pair in mergedPairs {
                    if case .scalar(let key) = pair.key {
                        guard seen[key.value] == nil else { continue }
                        seen[key.value] = key.mark
                    }
                    result.append(pair)
                }
            }
        }
        return result
    }
}

@available(*, unavailable)
extension YAMLParser: Sendable {}
