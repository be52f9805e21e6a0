// Writes a Swift file holding each migration's version, name and SQL text.
// Usage: MigrationEmbedder OUTPUT.swift NNN_name.sql...
import Foundation

let arguments = CommandLine.arguments.dropFirst()
guard let output = arguments.first else {
    FileHandle.standardError.write(Data("usage: MigrationEmbedder OUTPUT.swift FILE.sql...\n".utf8))
    exit(64)
}
var entries: [String] = []
for path in arguments.dropFirst().sorted() {
    let file = URL(fileURLWithPath: path).lastPathComponent
    let stem = String(file.dropLast(".sql".count))
    let digits = stem.prefix { $0.isNumber }
    guard let version = Int(digits), digits.count > 0 else {
        FileHandle.standardError.write(Data("\(path): error: migration file names start with a number (NNN_name.sql)\n".utf8))
        exit(65)
    }
    let name = stem.dropFirst(digits.count).drop { $0 == "_" || $0 == "-" }
    let sql = try String(contentsOfFile: path, encoding: .utf8)
    // Base64 keeps any quote or backslash in the SQL out of Swift's string syntax.
    let encoded = Data(sql.utf8).base64EncodedString()
    entries.append("        (version: \(version), name: \"\(name)\", sqlBase64: \"\(encoded)\"),")
}
let source = """
// Generated from migrations/*.sql by the EmbedMigrations build plugin. Do not edit.
enum EmbeddedMigrations {
    static let all: [(version: Int, name: String, sqlBase64: String)] = [
\(entries.joined(separator: "\n"))
    ]
}

"""
try source.write(toFile: output, atomically: true, encoding: .utf8)
