"""One pydantic-settings ``Settings``, nested per component.

Sources, highest priority first: keyword arguments, environment (``HYBRIDSAG_`` prefix, nested
delimiter ``__``, e.g. ``HYBRIDSAG_FUSION__K=30``), a ``.env`` file, a TOML file (the path in
``HYBRIDSAG_CONFIG``, else ``config/hybridsag.toml`` when it exists), then the defaults below.
Unknown keys are rejected (a ``HYBRIDSAG_*`` variable that names no setting too) and numbers
range-checked; a ``HYBRIDSAG_CONFIG`` that names no file and a TOML file that does not parse raise
:class:`~hybridsag.errors.ConfigError`. Validation errors never show input values (a misspelled key
may hold a secret): :func:`hybridsag.config.load_settings` turns them into one line per problem that
names the key and where it came from. Nothing is read at import time: build one ``Settings()`` at
the entry point and pass it down.

The sections live by job in the modules of this package: :mod:`~hybridsag.settings.index`
(chunking, tokenizer, query, store, lexical), :mod:`~hybridsag.settings.dense` (embedding,
Milvus), :mod:`~hybridsag.settings.ranking` (title, fusion, judges, SAG2, search),
:mod:`~hybridsag.settings.operations` (consistency, formats, ingest, sources, MCP),
:mod:`~hybridsag.settings.server` and :mod:`~hybridsag.settings.ab`; what they are built on in
:mod:`~hybridsag.settings.base`, where settings are read from in :mod:`~hybridsag.settings.sources`.
Import every name from here.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from hybridsag.errors import ConfigError
from hybridsag.settings.ab import (
    ABSettings,
    ArmSettings,
    EXPERIMENT_NAME_PATTERN,
    ExperimentSettings,
)
from hybridsag.settings.base import RemoteSection, comma_list, named_folder
from hybridsag.settings.dense import (
    EmbeddingSettings,
    HTTP_EMBEDDERS,
    HttpEmbeddingSettings,
    MilvusFieldMap,
    MilvusSettings,
)
from hybridsag.settings.index import (
    ChunkingSettings,
    LexicalSettings,
    QuerySettings,
    StoreSettings,
    TokenizerSettings,
)
from hybridsag.settings.operations import (
    ConsistencySettings,
    FormatsSettings,
    IngestSettings,
    McpSettings,
    SourcesSettings,
    WatchedFolder,
)
from hybridsag.settings.ranking import (
    ChatJudgeSettings,
    FusionSettings,
    JevSettings,
    JudgeSettings,
    RerankerSettings,
    Sag2Settings,
    SearchSettings,
    TitleSettings,
)
from hybridsag.settings.server import (
    LOOPBACK,
    MIN_TOKEN_CHARS,
    ROLES,
    ServerSettings,
    TokenSettings,
)
from hybridsag.settings.sources import CONFIG_VARIABLE, section_model, setting_layers, toml_path

__all__ = [
    "ABSettings",
    "ArmSettings",
    "ChatJudgeSettings",
    "ChunkingSettings",
    "ConsistencySettings",
    "EmbeddingSettings",
    "ExperimentSettings",
    "FormatsSettings",
    "FusionSettings",
    "HTTP_EMBEDDERS",
    "HttpEmbeddingSettings",
    "IngestSettings",
    "JevSettings",
    "JudgeSettings",
    "LexicalSettings",
    "McpSettings",
    "MilvusFieldMap",
    "MilvusSettings",
    "QuerySettings",
    "RemoteSection",
    "RerankerSettings",
    "Sag2Settings",
    "SearchSettings",
    "SourcesSettings",
    "StoreSettings",
    "CONFIG_VARIABLE",
    "ServerSettings",
    "Settings",
    "comma_list",
    "section_model",
    "setting_layers",
    "toml_path",
    "TitleSettings",
    "TokenSettings",
    "TokenizerSettings",
    "WatchedFolder",
    "EXPERIMENT_NAME_PATTERN",
    "LOOPBACK",
    "MIN_TOKEN_CHARS",
    "ROLES",
]


class Settings(BaseSettings):
    """All of hybridsag's settings. Build once at the entry point and pass down."""

    model_config = SettingsConfigDict(
        env_prefix="HYBRIDSAG_",
        env_nested_delimiter="__",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="forbid",
        frozen=True,
        hide_input_in_errors=True,
    )

    data_dir: Path = Path(".hybridsag")
    store: StoreSettings = StoreSettings()
    chunking: ChunkingSettings = ChunkingSettings()
    tokenizer: TokenizerSettings = TokenizerSettings()
    query: QuerySettings = QuerySettings()
    lexical: LexicalSettings = LexicalSettings()
    embedding: EmbeddingSettings = EmbeddingSettings()
    milvus: MilvusSettings = MilvusSettings()
    title: TitleSettings = TitleSettings()
    fusion: FusionSettings = FusionSettings()
    judge: JudgeSettings = JudgeSettings()
    sag2: Sag2Settings = Sag2Settings()
    search: SearchSettings = SearchSettings()
    consistency: ConsistencySettings = ConsistencySettings()
    server: ServerSettings = ServerSettings()
    formats: FormatsSettings = FormatsSettings()
    ingest: IngestSettings = IngestSettings()
    sources: SourcesSettings = SourcesSettings()
    mcp: McpSettings = McpSettings()
    ab: ABSettings = ABSettings()

    @field_validator("data_dir", mode="before")
    @classmethod
    def _check_data_dir(cls, value: object) -> object:
        return named_folder(value, "data_dir is empty; name a folder (default .hybridsag)")

    @property
    def sqlite_path(self) -> Path:
        return self.data_dir / "hybridsag.sqlite3"

    @property
    def store_location(self) -> Path | str:
        """Where the store is: the PostgreSQL URL of ``store.url``, else :attr:`sqlite_path`."""
        if self.store.url is not None:
            return self.store.url.get_secret_value()
        return self.sqlite_path

    @property
    def store_display(self) -> str:
        """Where the store is, for messages: the URL without its password, or the file."""
        if self.store.url is None:
            return str(self.sqlite_path)
        from urllib.parse import urlsplit

        url = urlsplit(self.store.url.get_secret_value())
        host = url.hostname or ""
        port = f":{url.port}" if url.port else ""
        user = f"{url.username}@" if url.username else ""
        return f"{url.scheme}://{user}{host}{port}{url.path}"

    @property
    def milvus_lite_path(self) -> Path:
        return self.data_dir / "milvus.db"

    @property
    def reports_dir(self) -> Path:
        return self.data_dir / "reports"

    @property
    def events_path(self) -> Path:
        """The A/B event store's SQLite file (``ab.events_path``, else under the data dir)."""
        return self.ab.events_path or self.data_dir / "events.sqlite3"

    @property
    def ab_dir(self) -> Path:
        """Where A/B reports and their charts are written (``<data_dir>/ab``)."""
        return self.data_dir / "ab"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """pydantic-settings' hook: the sources of :func:`setting_layers`, then the secrets
        directory's.

        Args:
            settings_cls: The class being built.
            init_settings: The keyword arguments' source.
            env_settings: pydantic's environment source, replaced by this module's own.
            dotenv_settings: pydantic's ``.env`` source, replaced by this module's own.
            file_secret_settings: The secrets directory's source, kept last.
        """
        layers = setting_layers(settings_cls, init_settings)
        return (*(source for _kind, source in layers), file_secret_settings)

    def public_dict(self) -> dict[str, object]:
        """Settings as JSON-safe data with secrets masked (for reports and config.json)."""
        return self.model_dump(mode="json")
