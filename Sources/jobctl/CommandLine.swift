import Foundation
import JobModel

// MARK: - Command descriptions

/// One option a command accepts, as the parser and the help text see it: a flag (`valueName == nil`)
/// or an option with a value. Commands declare options through the typed `Flag` and `Option<Value>`
/// (Options.swift), which build this.
struct OptionSpec: Sendable {
    let long: String
    let short: Character?
    let valueName: String?
    let help: String
    let repeatable: Bool
    /// The values the option takes, when they are a fixed set (states, kinds, formats): offered by shell
    /// completion.
    let choices: [String]
    /// Whether the value names a file (`--db`, `--config`, `-o`): shell completion offers file names for
    /// it. Any other value without `choices` (a queue, a time, a number) is offered nothing: file names
    /// there were only ever wrong.
    let completesFiles: Bool
    /// Checks a value while the command line is parsed, so a bad number is a usage error (exit 64)
    /// before the command does anything.
    let validate: (@Sendable (String) throws -> Void)?

    init(_ long: String, short: Character? = nil, value valueName: String? = nil, repeatable: Bool = false,
         help: String, choices: [String] = [], completesFiles: Bool = false, validate: (@Sendable (String) throws -> Void)? = nil) {
        self.choices = choices
        self.completesFiles = completesFiles
        self.long = long
        self.short = short
        self.valueName = valueName
        self.help = help
        self.repeatable = repeatable
        self.validate = validate
    }
}

/// A positional argument, for help text and arity checks.
struct ArgumentSpec: Sendable {
    let name: String
    let help: String
    let optional: Bool
    let variadic: Bool
    /// The values the argument takes, when they are a fixed set: offered by shell completion.
    let choices: [String]
    /// Whether the argument names a file (a manifest, an archive): shell completion offers file names
    /// for it, and for no other argument (a job id is not a file name).
    let completesFiles: Bool

    init(_ name: String, optional: Bool = false, variadic: Bool = false, choices: [String] = [], completesFiles: Bool = false,
         help: String) {
        self.choices = choices
        self.completesFiles = completesFiles
        self.name = name
        self.help = help
        self.optional = optional
        self.variadic = variadic
    }
}

/// A subcommand: its help text, what it accepts, and what it runs.
struct CommandSpec: Sendable {
    let name: String
    let abstract: String
    let arguments: [ArgumentSpec]
    let options: [OptionSpec]
    let discussion: String?
    let run: @Sendable (ParsedArguments, Context) throws -> Int32

    init(name: String, abstract: String, arguments: [ArgumentSpec] = [], options: [any OptionDeclaration] = [],
         discussion: String? = nil, run: @escaping @Sendable (ParsedArguments, Context) throws -> Int32) {
        self.name = name
        self.abstract = abstract
        self.arguments = arguments
        self.options = options.map(\.spec) + Self.globalOptions.map(\.spec)
        self.discussion = discussion
        self.run = run
    }

    /// The options every command takes, before or after its name (`jobctl --db x.db list`), in the order
    /// every help lists them: `-h` last, as at the top level.
    static let globalOptions: [any OptionDeclaration] = [Options.database, Options.config, Options.noColor, Options.help]

    var usageLine: String {
        var parts = ["jobctl", name]
        let ownOptions = options.filter { option in !Self.globalOptions.contains { $0.spec.long == option.long } }
        if !ownOptions.isEmpty { parts.append("[<options>]") }
        for argument in arguments {
            var text = "<\(argument.name)>"
            if argument.variadic { text += " ..." }
            if argument.optional { text = "[\(text)]" }
            parts.append(text)
        }
        return parts.joined(separator: " ")
    }

    /// The usage a usage error prints: the usage line and where the command's help is.
    var usageHint: String { usageLine + "\n  See 'jobctl help \(name)'." }

    /// The command's help, laid out by `layout` (`jobctl list --help`, `jobctl help list`).
    func helpText(_ layout: HelpLayout = HelpLayout(width: HelpLayout.defaultWidth)) -> String {
        var lines = layout.hanging("OVERVIEW: ", abstract) + [""]
        if let discussion { lines += layout.prose(discussion) + [""] }
        lines += layout.hanging("USAGE: ", usageLine) + [""]
        if !arguments.isEmpty {
            lines.append("ARGUMENTS:")
            for argument in arguments {
                lines += layout.entry("<\(argument.name)>", argument.help)
            }
            lines.append("")
        }
        lines.append("OPTIONS:")
        lines += options.flatMap(layout.option)
        lines += [""] + layout.table(ExitCode.helpText)
        return lines.joined(separator: "\n") + "\n"
    }
}

// MARK: - Parsing

/// A usage error: printed as `Error: …` plus the usage line, exit 64.
struct UsageError: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
    init(_ message: String) { self.message = message }
}

/// The parsed command line of one command. Read it through the typed declarations:
/// `arguments[Options.json]`, `try arguments.value(Options.limit)`.
struct ParsedArguments: Sendable {
    var positionals: [String] = []
    private var values: [String: [String]] = [:]
    private var flags: Set<String> = []

    /// Whether a flag was given.
    subscript(flag: Flag) -> Bool { flags.contains(flag.spec.long) }

    /// The (last) value of an option, parsed and range-checked; nil when it was not given.
    func value<Value>(_ option: Option<Value>) throws -> Value? {
        guard let text = values[option.spec.long]?.last else { return nil }
        return try option.parse(text)
    }

    /// The options `fillIfAbsent` set: a message about one names the file's key, not the flag.
    private(set) var filledFromFile: Set<String> = []

    /// Sets an option's values when the command line did not give it (a configuration file's setting).
    mutating func fillIfAbsent(_ long: String, _ texts: [String]) {
        guard values[long] == nil else { return }
        values[long] = texts
        filledFromFile.insert(long)
    }

    /// Sets a flag the command line did not give (a configuration file's `true`).
    mutating func fillFlagIfAbsent(_ long: String) {
        guard !flags.contains(long) else { return }
        flags.insert(long)
        filledFromFile.insert(long)
    }

    /// Every value of a repeatable option, parsed.
    func values<Value>(_ option: Option<Value>) throws -> [Value] {
        try (values[option.spec.long] ?? []).map(option.parse)
    }

    /// Parses `arguments` against `spec` (swift-argument-parser conventions: `--opt value`, `--opt=value`,
    /// `-h`, `--` ends options). Every option value is validated here; so is the number of positional
    /// arguments, unless `checkingArity` is false (the caller says what is wrong in its own words).
    static func parse(_ arguments: [String], for spec: CommandSpec, checkingArity: Bool = true) throws -> ParsedArguments {
        var parsed = ParsedArguments()
        var index = 0
        var optionsEnded = false
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if optionsEnded || argument == "-" || !argument.hasPrefix("-") {
                parsed.positionals.append(argument)
                continue
            }
            if argument == "--" {
                optionsEnded = true
                continue
            }
            var name: String
            var inlineValue: String?
            if argument.hasPrefix("--") {
                name = String(argument.dropFirst(2))
                if let equals = name.firstIndex(of: "=") {
                    inlineValue = String(name[name.index(after: equals)...])
                    name = String(name[..<equals])
                }
            } else {
                let short = argument.dropFirst()
                guard short.count == 1, let option = spec.options.first(where: { $0.short == short.first }) else {
                    throw UsageError("unknown option '\(argument)'")
                }
                name = option.long
            }
            guard let option = spec.options.first(where: { $0.long == name }) else {
                let hint = NearestName.nearest(to: name, among: spec.options.map(\.long), within: 2)
                    .map { " (did you mean '--\($0)'?)" } ?? ""
                throw UsageError("unknown option '--\(name)'\(hint)")
            }
            if option.valueName == nil {
                if inlineValue != nil { throw UsageError("--\(name) takes no value") }
                parsed.flags.insert(name)
                continue
            }
            let value: String
            if let inlineValue {
                value = inlineValue
            } else {
                guard index < arguments.count else { throw UsageError("--\(name) needs a value <\(option.valueName ?? "value")>") }
                value = arguments[index]
                index += 1
            }
            if !option.repeatable, parsed.values[name] != nil {
                throw UsageError("--\(name) was given more than once")
            }
            try option.validate?(value)
            parsed.values[name, default: []].append(value)
        }
        if parsed.flags.contains(Options.help.spec.long) || !checkingArity { return parsed }
        let required = spec.arguments.filter { !$0.optional }.count
        let variadic = spec.arguments.contains { $0.variadic }
        if parsed.positionals.count < required {
            let missing = spec.arguments.filter { !$0.optional }[parsed.positionals.count]
            throw UsageError("missing expected argument '<\(missing.name)>'")
        }
        if !variadic, parsed.positionals.count > spec.arguments.count {
            throw UsageError("unexpected argument '\(parsed.positionals[spec.arguments.count])'")
        }
        return parsed
    }
}
