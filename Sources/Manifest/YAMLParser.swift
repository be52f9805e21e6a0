import CYAML

// MARK: - Results

/// Something wrong with the YAML itself, found while building the node tree.
struct YAMLProblem: Sendable, Hashable {
    enum Kind: Sendable, Hashable {
        /// libyaml refused the text (its problem text, at its mark).
        case syntax
        /// A key written twice in one mapping.
        case duplicateKey
        /// Valid YAML this reader does not take: several documents, unknown aliases, alias bombs, bad merges.
        case unsupported
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
/// The only type that touches libyaml: it owns the `yaml_parser_t` and a copy of the input (libyaml
/// reads from it until the parser is deleted) and frees both in `deinit`. One parser parses once.
/// See <https://pyyaml.org/wiki/LibYAML> and `yaml.h` (`yaml_parser_parse`).
final class YAMLParser {
    /// Aliases can make a small text expand into a huge tree ("billion laughs"); a manifest never needs this many.
    static let maximumNodeCount = 100_000

    private let parser: UnsafeMutablePointer<yaml_parser_t>
    private let input: UnsafeMutableBufferPointer<UInt8>
    private let isInitialized: Bool
    private let source: SourceText

    init(source: SourceText) {
        self.source = source
        let bytes = Array(source.text.utf8)
        parser = .allocate(capacity: 1)
        parser.initialize(to: yaml_parser_t())
        input = .allocate(capacity: max(bytes.count, 1))
        _ = input.initialize(from: bytes)
        // yaml_parser_initialize fails only when it cannot allocate its buffers.
        isInitialized = yaml_parser_initialize(parser) != 0
        if isInitialized {
            yaml_parser_set_input_string(parser, input.baseAddress, bytes.count)
        }
    }

    deinit {
        if isInitialized { yaml_parser_delete(parser) }
        parser.deinitialize(count: 1)
        parser.deallocate()
        input.deallocate()
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
        guard yaml_parser_parse(parser, &event) != 0 else { throw ParseFailure(problem: currentProblem()) }
        defer { yaml_event_delete(&event) }
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
            return .scalar(YAMLScalar(value: value, style: style, tag: tag, mark: mark), anchor: Self.string(data.anchor))
        case YAML_SEQUENCE_START_EVENT:
            return .sequenceStart(anchor: Self.string(event.data.sequence_start.anchor), mark: mark)
        case YAML_SEQUENCE_END_EVENT:
            return .sequenceEnd
        case YAML_MAPPING_START_EVENT:
            return .mappingStart(anchor: Self.string(event.data.mapping_start.anchor), mark: mark)
        case YAML_MAPPING_END_EVENT:
            return .mappingEnd
        default:
            return .streamEnd
        }
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
        var nodeCountAtStart: Int
    }

    private var stack: [Frame] = []
    private var anchors: [String: (node: YAMLNode, size: Int)] = [:]
    private var openAnchors: Set<String> = []
    private var nodeCount = 0
    private var root: YAMLNode?
    private var problems: [YAMLProblem] = []

    /// Reads the stream. A second document, a syntax error or an unknown alias ends the parse with a
    /// problem; duplicate keys are reported and the first value kept.
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
                            message: "a manifest is one YAML document, but a second one starts here; put all jobs under one 'jobs:' list",
                            mark: mark))
                    }
                case .scalar(let scalar, let anchor):
                    try complete(.scalar(scalar), anchor: anchor, size: 1)
                case .alias(let anchor, let mark):
                    try resolveAlias(anchor, at: mark)
                case .sequenceStart(let anchor, let mark):
                    open(isMapping: false, anchor: anchor, mark: mark)
                case .mappingStart(let anchor, let mark):
                    open(isMapping: true, anchor: anchor, mark: mark)
                case .sequenceEnd, .mappingEnd:
                    guard let frame = stack.popLast() else { continue }
                    if let anchor = frame.anchor { openAnchors.remove(anchor) }
                    let node: YAMLNode = frame.isMapping
                        ? .mapping(finishMapping(frame.pairs), frame.mark)
                        : .sequence(frame.items, frame.mark)
                    try complete(node, anchor: frame.anchor, size: nodeCount + 1 - frame.nodeCountAtStart)
                }
            }
            return YAMLDocument(root: root, problems: problems)
        } catch {
            return YAMLDocument(root: nil, problems: problems + [error.problem])
        }
    }

    private func open(isMapping: Bool, anchor: String?, mark: SourceMark) {
        if let anchor { openAnchors.insert(anchor) }
        stack.append(Frame(isMapping: isMapping, mark: mark, anchor: anchor, nodeCountAtStart: nodeCount))
    }

    private func resolveAlias(_ anchor: String, at mark: SourceMark) throws(ParseFailure) {
        guard let anchored = anchors[anchor] else {
            let message = openAnchors.contains(anchor)
                ? "alias '*\(anchor)' refers to the collection that contains it; recursive structures are not supported"
                : "alias '*\(anchor)' refers to no anchor; define '&\(anchor)' before using it"
            throw ParseFailure(problem: YAMLProblem(kind: .unsupported, message: message, mark: mark))
        }
        try countNodes(anchored.size, at: mark)
        attach(anchored.node)
    }

    private func complete(_ node: YAMLNode, anchor: String?, size: Int) throws(ParseFailure) {
        // Collections counted their children as they arrived; only their own node is new here.
        try countNodes(1, at: node.mark)
        if let anchor { anchors[anchor] = (node, size) }
        attach(node)
    }

    private func countNodes(_ count: Int, at mark: SourceMark) throws(ParseFailure) {
        nodeCount += count
        if nodeCount > Self.maximumNodeCount {
            throw ParseFailure(problem: YAMLProblem(
                kind: .unsupported,
                message: "the document expands to more than \(Self.maximumNodeCount) nodes through aliases; write it out without them",
                mark: mark))
        }
    }

    private func attach(_ node: YAMLNode) {
        guard !stack.isEmpty else {
            root = node
            return
        }
        let top = stack.count - 1
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
