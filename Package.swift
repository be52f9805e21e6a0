// swift-tools-version:6.0
import PackageDescription

/// `JOBCTL_FUZZ=1` declares the libFuzzer harness (Tests/Fuzz, `make fuzz`) instead of the usual build:
/// unset, the package below is exactly the normal one.
let fuzzing = Context.environment["JOBCTL_FUZZ"] == "1"

let package = Package(
    name: "jobctl",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "jobctl", targets: ["jobctl"]),
    ],
    targets: [
        // MARK: - C libraries (modulemap + typed shim only)
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        // libcurl and libpq: headers only at build time; each is loaded (dlopen) when first needed, so
        // neither is linked (see their shim.h). Debian: libcurl4-openssl-dev, libpq-dev.
        .systemLibrary(name: "CCurl", path: "Sources/CCurl"),
        .systemLibrary(name: "CYAML", pkgConfig: "yaml-0.1", providers: [.apt(["libyaml-dev"])]),
        .systemLibrary(name: "CCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CCRC32C", path: "Sources/CCRC32C"),
        .systemLibrary(name: "CFileSystem", path: "Sources/CFileSystem"),
        .systemLibrary(name: "CPostgres", path: "Sources/CPostgres"),
        .systemLibrary(name: "CZlib", pkgConfig: "zlib", providers: [.apt(["zlib1g-dev"])]),

        // MARK: - Build tooling: migrations/ENGINE/*.sql embedded into the binary
        .executableTarget(name: "MigrationEmbedder", path: "Sources/MigrationEmbedder"),
        .plugin(name: "EmbedMigrations", capability: .buildTool(), dependencies: ["MigrationEmbedder"]),

        // MARK: - Library modules
        // JobModel's hidden names (`HiddenName`) take the SHA-256 of a long name from Checksums, which
        // depends on no jobctl module.
        .target(name: "JobModel", dependencies: ["Checksums"]),
        .target(name: "JobLifecycle", dependencies: ["JobModel"]),
        .target(name: "StorePort", dependencies: ["JobModel", "JobLifecycle", "Checksums"]),
        .target(name: "Checksums", dependencies: ["CCrypto", "CCRC32C"]),
        .target(name: "EventStore", dependencies: ["CSQLite", "CFileSystem", "JobModel", "JobLifecycle", "StorePort", "Checksums"],
                plugins: ["EmbedMigrations"]),
        .target(name: "PostgresStore", dependencies: ["CPostgres", "JobModel", "JobLifecycle", "StorePort", "Checksums"],
                plugins: ["EmbedMigrations"]),
        .target(name: "Manifest", dependencies: ["CYAML", "CFileSystem", "JobModel"]),
        .target(name: "Storage", dependencies: ["CCurl", "CFileSystem", "JobModel", "Checksums"]),
        .target(name: "Tasks", dependencies: ["JobModel", "Storage"]),
        .target(name: "Worker", dependencies: ["CFileSystem", "JobModel", "JobLifecycle", "StorePort", "Storage", "Tasks"]),
        .target(name: "Retention", dependencies: ["CZlib", "JobModel", "StorePort", "Checksums"]),
        .executableTarget(name: "jobctl", dependencies: ["JobModel", "JobLifecycle", "StorePort", "EventStore", "PostgresStore", "Manifest", "Storage", "Tasks", "Worker", "Retention"]),

        // MARK: - Tests
        .target(name: "TestSupport", dependencies: ["JobModel"], path: "Tests/TestSupport"),
        .testTarget(name: "JobModelTests", dependencies: ["JobModel", "Checksums"]),
        .testTarget(name: "JobLifecycleTests", dependencies: ["JobLifecycle", "JobModel"]),
        .testTarget(name: "EventStoreTests", dependencies: ["EventStore", "PostgresStore", "StorePort", "JobLifecycle", "JobModel", "TestSupport"],
                    exclude: ["Fixtures"]),
        .testTarget(name: "PostgresStoreTests", dependencies: ["PostgresStore", "StorePort", "JobModel", "Checksums", "TestSupport"]),
        .testTarget(name: "ManifestTests", dependencies: ["Manifest", "JobModel", "TestSupport"]),
        .testTarget(name: "StorageTests", dependencies: ["Storage", "JobModel", "Checksums", "TestSupport"],
                    exclude: ["Fixtures"]),
        .testTarget(name: "TasksTests", dependencies: ["Tasks", "Storage", "JobModel", "TestSupport"]),
        .testTarget(name: "WorkerTests", dependencies: ["Worker", "EventStore", "PostgresStore", "StorePort", "Storage", "JobLifecycle", "JobModel", "TestSupport"]),
        .testTarget(name: "RetentionTests", dependencies: ["Retention", "JobModel", "StorePort", "Checksums"]),
        .testTarget(name: "CLITests", dependencies: ["JobModel", "JobLifecycle", "Checksums", "StorePort", "EventStore", "PostgresStore", "TestSupport", "Worker", "jobctl"]),
    ],
    swiftLanguageModes: [.v6]
)

// MARK: - The fuzz build (JOBCTL_FUZZ=1 only)

// The harness is one executable, `jobctl-fuzz` (see Tests/Fuzz/main.swift), that calls the parsers of
// every module, the `jobctl` module's own (the configuration file, times, arguments) included. So that
// it can import that module, the module is a library here, without its main.swift; every module is
// built with libFuzzer's coverage instrumentation and AddressSanitizer, and with testing enabled so the
// harness reaches internal parsers (`@testable import`) in a release build too. Build with
// `JOBCTL_FUZZ=1 swift build -c release --product jobctl-fuzz` (or `make fuzz`).
if fuzzing {
    let instrumented: [SwiftSetting] = [.unsafeFlags(["-sanitize=fuzzer,address", "-enable-testing"])]
    for target in package.targets where target.type == .regular || target.type == .executable {
        guard target.name != "MigrationEmbedder" else { continue }
        target.swiftSettings = (target.swiftSettings ?? []) + instrumented
    }
    if let index = package.targets.firstIndex(where: { $0.name == "jobctl" }) {
        let cli = package.targets[index]
        package.targets[index] = .target(name: "jobctl", dependencies: cli.dependencies, exclude: ["main.swift"],
                                         swiftSettings: instrumented)
    }
    // Tests are not built here (they expect the `jobctl` executable).
    package.targets.removeAll { $0.type == .test || $0.name == "TestSupport" }
    package.targets.append(
        .executableTarget(name: "jobctl-fuzz",
                          dependencies: ["jobctl", "JobModel", "JobLifecycle", "StorePort", "Checksums", "EventStore",
                                         "PostgresStore", "Manifest", "Storage", "Retention", "Worker", "CSQLite"],
                          path: "Tests/Fuzz",
                          swiftSettings: instrumented,
                          linkerSettings: [.unsafeFlags(["-sanitize=fuzzer,address"])]))
    package.products = [.executable(name: "jobctl-fuzz", targets: ["jobctl-fuzz"])]
}
