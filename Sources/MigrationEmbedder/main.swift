// Writes a Swift file holding, per database engine, each migration's version, name and SQL text.
// Usage: MigrationEmbedder OUTPUT.swift [--engine NAME NNN_name.sql...]...
import Foundation

func fail(_ message: String, status: Int32) -> Never {
    FileHandle.standardError.write(Data("\(message)\n".utf8))
    exit(status)
}

var arguments = Array(CommandLine.arguments.dropFirst())
guard !arguments.isEmpty else {
    fail("usage: MigrationEmbedder OUTPUT.swift [--engine NAME FILE.sql...]...", status: 64)
}
let output = arguments.removeFirst()

// engine name → its files, in argument order of first appearance
var engines: [(name: String, files: [String])] = []
while !arguments.isEmpty {
    let flag = arguments.removeFirst()
    guard flag == "--engine", !arguments.isEmpty else {
        fail("MigrationEmbedder: expected `--engine NAME` before migration files, got '\(flag)'", status: 64)
    }
    let name = arguments.removeFirst()
    guard let first = name.first, first.isLetter, name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) }) else {
        fail("migrations/\(name): error: an engine folder name is letters and digits only (sqlite, postgres)", status: 65)
    }
    var files: [String] = []
    while let next = arguments.first, next != "--engine" {
        files.append(arguments.removeFirst())
    }
    engines.append((name, files))
}

var properties: [String] = []
for engine in engines {
    var entries: [String] = []
    var seen: [Int: String] = [:]
    for path in engine.files.sorted() {
        let file = URL(fileURLWithPath: path).lastPathComponent
        let stem = String(file.dropLast(".sql".count))
        let digits = stem.prefix { $0.isNumber }
        guard let version = Int(digits), digits.count > 0 else {
            fail("\(path): error: migration file names start with a number (NNN_name.sql)", status: 65)
        }
        if let other = seen[version] {
            fail("\(path): error: version \(version) is also \(other); give each migration of an engine its own number", status: 65)
        }
        seen[version] = file
        let name = stem.dropFirst(digits.count).drop { $0 == "_" || $0 == "-" }
        let sql = try String(contentsOfFile: path, encoding: .utf8)
        // Base64 keeps any quote or backslash in the SQL out of Swift's string syntax.
        let encoded = Data(sql.utf8).base64EncodedString()
        entries.append("        (version: \(version), name: \"\(name)\", sqlBase64: \"\(encoded)\"),")
    }
    properties.append("""
        /// migrations/\(engine.name)/*.sql, in version order.
        static let \(engine.name): [(version: Int, name: String, sqlBase64: String)] = [
    \(entries.joined(separator: "\n"))
        ]
    """)
}
let source = """
// Generated from migrations/ENGINE/*.sql by the EmbedMigrations build plugin. Do not edit.
enum EmbeddedMigrations {
\(properties.joined(separator: "\n"))
}

"""
try source.write(toFile: output, atomically: true, encoding: .utf8)
