// kt-chat holds a conversation: a kt-synth model with a real vocabulary and chat template (Qwen3's ChatML), two
// user turns on standard input, replies streamed, the second turn reusing the first turn's cache. The text is
// noise (random weights); the plumbing is what is checked.
#include <catch2/catch.hpp>
#include <regex>
#include <string>

#include "support/test_support.h"

namespace {

// "[turn 2: 41 prompt tokens, 29 reused from the cache, 12 decoded; 6 generated (...)"
struct Turn {
    long prompt = -1, reused = -1, decoded = -1, generated = -1;
};

Turn turn_line(const std::string &err, int turn) {
    const std::regex re("\\[turn " + std::to_string(turn) +
                        ": ([0-9]+) prompt tokens, ([0-9]+) reused from the cache, ([0-9]+) decoded; ([0-9]+) generated");
    std::smatch m;
    Turn t;
    if (std::regex_search(err, m, re)) {
        t.prompt = std::stol(m[1]);
        t.reused = std::stol(m[2]);
        t.decoded = std::stol(m[3]);
        t.generated = std::stol(m[4]);
    }
    return t;
}

}  // namespace

TEST_CASE("kt-chat: a two-turn conversation with a synthetic model and Qwen3's chat template") {
    kt::test::TempDir dir;
    const std::string model = dir.file("chat.gguf");
    const auto synth = kt::test::run_program(std::string(KT_SYNTH_EXE) + " -o '" + model +
                                             "' --arch qwen3moe --layers 2 --hidden 64 --heads 4 --heads-kv 2 "
                                             "--head-dim 16 --experts 4 --experts-used 2 --expert-ff 32 --type q8_0 "
                                             "--vocab-from '" + kt::test::testdata_path("tokenizer/qwen3.gguf") + "'");
    INFO(synth.err);
    REQUIRE(synth.exit_code == 0);

    const auto chat = kt::test::run_program(std::string(KT_CHAT_EXE) + " -m '" + model +
                                                "' -v --greedy -n 6 -s 'You are terse.'",
                                            "Hello there!\nAnd how are you today?\n/quit\n");
    INFO("stdout: " << chat.out << "\nstderr: " << chat.err);
    REQUIRE(chat.exit_code == 0);
    const Turn first = turn_line(chat.err, 1), second = turn_line(chat.err, 2);
    REQUIRE(first.prompt > 0);
    REQUIRE(second.prompt > first.prompt);
    CHECK(first.reused == 0);
    CHECK(first.decoded == first.prompt);
    // Turn 2 renders the whole conversation again; everything up to the first reply is already in the cache.
    CHECK(second.reused > first.prompt);
    CHECK(second.decoded == second.prompt - second.reused);
    CHECK(first.generated >= 1);
    CHECK(first.generated <= 6);
    // One streamed reply per turn, each ended by a newline.
    CHECK(std::count(chat.out.begin(), chat.out.end(), '\n') >= 2);
}

TEST_CASE("kt-chat: the shipped model chats with no flags, through the template it carries") {
    const auto chat = kt::test::run_program(std::string(KT_CHAT_EXE) + " -m '" + KT_TINY_MOE_Q8 + "' -v --greedy -n 12",
                                            "And God said\n/reset\nThus saith the LORD\n");
    INFO("stdout: " << chat.out << "\nstderr: " << chat.err);
    REQUIRE(chat.exit_code == 0);
    // Its template puts each turn's text on a line of its own: BOS, "And", " God", " said", "\n" (the ids of
    // the training script's tokenizer, tests/e2e/data/kt_tiny_moe_expected.txt, plus the newline byte).
    CHECK(turn_line(chat.err, 1).prompt == 5);
    CHECK(chat.err.find("(new conversation)") != std::string::npos);
    CHECK(turn_line(chat.err, 2).reused >= 0);
    CHECK(chat.out.size() > 10);
}

TEST_CASE("kt-chat: a model without a chat template needs --template, then works with a built-in family") {
    kt::test::TempDir dir;
    const std::string model = dir.file("plain.gguf");
    // LLaMA 2's SentencePiece vocabulary carries no chat template.
    const auto synth = kt::test::run_program(std::string(KT_SYNTH_EXE) + " -o '" + model +
                                             "' --arch llama --layers 1 --hidden 64 --heads 4 --heads-kv 2 "
                                             "--head-dim 16 --ff 64 --type q8_0 --vocab-from '" +
                                             kt::test::testdata_path("tokenizer/llama2-spm.gguf") + "'");
    INFO(synth.err);
    REQUIRE(synth.exit_code == 0);
    const auto refused = kt::test::run_program(std::string(KT_CHAT_EXE) + " -m '" + model + "' --greedy -n 4", "Hi\n");
    CHECK(refused.exit_code == 1);
    CHECK(refused.err.find("chat template") != std::string::npos);

    const auto chat = kt::test::run_program(std::string(KT_CHAT_EXE) + " -m '" + model +
                                                "' --template chatml -v --greedy -n 4",
                                            "Hello\n/reset\nAgain\n");
    INFO("stdout: " << chat.out << "\nstderr: " << chat.err);
    REQUIRE(chat.exit_code == 0);
    CHECK(chat.err.find("(new conversation)") != std::string::npos);
    CHECK(turn_line(chat.err, 2).prompt > 0);
}

TEST_CASE("kt-chat: usage errors exit with 2") {
    CHECK(kt::test::run_program(KT_CHAT_EXE).exit_code == 2);
    CHECK(kt::test::run_program(std::string(KT_CHAT_EXE) + " -m x.gguf --frobnicate").exit_code == 2);
    CHECK(kt::test::run_program(std::string(KT_CHAT_EXE) + " -m x.gguf -n 0").exit_code == 2);
    CHECK(kt::test::run_program(std::string(KT_CHAT_EXE) + " -m /nonexistent.gguf").exit_code == 1);
}
