import Foundation
import PackagePlugin

/// Embeds every `migrations/ENGINE/NNN_name.sql` file of the package into the target as Swift source,
/// one numbered series per database engine (`EmbeddedMigrations.sqlite`, `EmbeddedMigrations.postgres`),
/// so the `jobctl` binary carries its schemas and works from any directory after install.
@main
struct EmbedMigrations: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        let root = context.package.directoryURL.appending(path: "migrations")
        let manager = FileManager.default
        let entries = (try? manager.contentsOfDirectory(at: root, includingPropertiesForKeys: nil)) ?? []
        // A file left at the top level would silently belong to no engine.
        for stray in entries where stray.pathExtension == "sql" {
            Diagnostics.error("\(stray.path): migrations live in one folder per engine: move it to migrations/sqlite/ or migrations/postgres/")
        }
        var arguments: [String] = []
        var inputs: [URL] = []
        let engines = entries
            .filter { (try? $0.resourceValues(forKeys: [.isDirectoryKey]).isDirectory) == true }
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
        for engine in engines {
            let files = ((try? manager.contentsOfDirectory(at: engine, includingPropertiesForKeys: nil)) ?? [])
                .filter { $0.pathExtension == "sql" }
                .sorted { $0.lastPathComponent < $1.lastPathComponent }
            arguments += ["--engine", engine.lastPathComponent] + files.map(\.path)
            inputs += files
        }
        let output = context.pluginWorkDirectoryURL.appending(path: "EmbeddedMigrations.swift")
        return [
            .buildCommand(
                displayName: "Embedding \(inputs.count) migrations for \(engines.count) engines",
                executable: try context.tool(named: "MigrationEmbedder").url,
                arguments: [output.path] + arguments,
                inputFiles: inputs,
                outputFiles: [output]
            ),
        ]
    }
}
